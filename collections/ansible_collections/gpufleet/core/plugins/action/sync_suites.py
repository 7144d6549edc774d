"""gpufleet.core.sync_suites: verify's node suites on a node in one command, written only
when they changed (gpufleet.verify.suite_sync).

    - gpufleet.core.sync_suites:
        python: /opt/gpufleet/env/bin/python   # the env that has gpufleet
        src: /path/to/checkout                 # holds the suite directories
        names: [checks, smoke_tests]
        dest: /var/lib/gpufleet/suites

Returns ``digest`` and ``changed`` (true when the node's copy was replaced).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    gpufleet_argv,
    gpufleet_required_by,
    require_args,
    run_plain,
)

_NAME = "gpufleet.core.sync_suites"


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"python", "src", "names", "dest"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        require_args(_NAME, args, ("python", "src", "dest"))
        names = [str(n) for n in args.get("names") or []]
        if not names:
            return {**result, "changed": False, "skipped": True, "msg": "no suites to sync"}
        with gpufleet_required_by(_NAME):
            from gpufleet.verify import suite_sync as suitesync
        try:
            blob, digest = suitesync.build(Path(str(args["src"])), names)
        except (suitesync.SyncError, OSError) as exc:
            raise AnsibleActionFail(f"cannot pack the suites: {exc}") from exc
        argv = gpufleet_argv(args["python"], "verify.suite_sync", "install", str(args["dest"]))
        argv += ["--digest", digest] + [f"--name={n}" for n in names]
        res = run_plain(self, _NAME, argv, env=False, in_data=base64.b64encode(blob))
        out = (res.get("stdout") or "").strip().splitlines()
        if res.get("rc") != 0 or not out or out[-1] not in ("installed", "unchanged"):
            err = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
            host = task_vars.get("inventory_hostname", "?")
            return {
                **result,
                "failed": True,
                "rc": res.get("rc"),
                "msg": (
                    f"{host}: cannot install the suites under {args['dest']} "
                    f"(rc {res.get('rc')}: {err[-1] if err else 'no output'}) -> check that "
                    f"{args['python']} has gpufleet (make provision) and that the directory "
                    "is writable"
                ),
            }
        result.update(changed=out[-1] == "installed", digest=digest)
        return result
