"""gpufleet.core.torch_facts: what an env's torch is, judged against the torch step, in one
command on the node (torch_env's probe before the install and its check after it).

    - gpufleet.core.torch_facts:
        python: /opt/gpufleet/env/bin/python   # the env's interpreter (may not exist yet)
        node_python: /usr/bin/python3          # runs the script where the env has none
        install: "{{ __torch_env_step }}"      # gpufleet.core.torch_install's answer
        settings: {source, index_url, find_links, index_root}
        python_version: "3.11"
        import: false                          # true: also import torch (after the install)

Runs :mod:`gpufleet.provisioning.torch_probe` (its text, as ``python -I -c``: the env need
not hold gpufleet) and judges the answer with
:func:`gpufleet.planning.torch_source.found_problems`. For a wheelhouse source whose pin
is not known yet, the same command lists the torch wheels of the find-links (given on stdin,
never on the command line: they may carry credentials) and the pin is chosen by
:func:`~gpufleet.planning.torch_source.wheelhouse_pin`; a wheelhouse without the build
fails the task with what it holds. Returns ``found``, ``problems`` (one line per difference;
[] = the env holds the planned build), ``converged`` and ``install`` (with its pin).
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    gpufleet_required_by,
    output_tail,
    require_args,
    run_plain,
)

_NAME = "gpufleet.core.torch_facts"
_RUNNER = (
    'if [ -x "$1" ]; then py=$1; own=1; else py=$2; own=0; fi; shift 2; '
    'out=$("$py" -I -c "$@") || exit $?; printf \'{"own": %s, "facts": %s}\\n\' "$own" "$out"'
)


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("python", "node_python", "install", "settings", "python_version", "import")
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        with gpufleet_required_by(_NAME):
            from gpufleet.planning import torch_source
            from gpufleet.provisioning import torch_probe
        args = dict(self._task.args)
        require_args(_NAME, args, ("python", "install", "python_version"))
        node = str(task_vars.get("inventory_hostname", "?"))
        install = dict(args["install"])
        settings = torch_source.SourceSettings.from_mapping(args.get("settings") or {})
        do_import = boolean(args.get("import", False), strict=False)
        wheelhouse = install.get("source") == "wheelhouse" and not install.get("requirement")
        flags = [*(["--import"] if do_import else []), *(["--find-links"] if wheelhouse else [])]
        node_python = str(args.get("node_python") or "/usr/bin/python3")
        script = inspect.getsource(torch_probe)
        argv = ["sh", "-c", _RUNNER, "_", str(args["python"]), node_python, script, *flags]
        links = json.dumps(list(settings.find_links)).encode() if wheelhouse else None
        res = run_plain(self, _NAME, argv, in_data=links)
        if res.get("rc") != 0:
            raise AnsibleActionFail(
                f"{node}: reading the env's torch failed (rc {res.get('rc')}): "
                f"{output_tail(res, 1000) or 'no output'} -> fix: run {args['python']} -c "
                "'import torch' on the node and repair what it reports"
            )
        try:
            answer = json.loads(str(res.get("stdout") or "").strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise AnsibleActionFail(
                f"{node}: the torch facts script printed no JSON: {output_tail(res, 500)}"
            ) from None
        facts = dict(answer["facts"])
        if not answer["own"]:  # the env has no interpreter: nothing of it is installed
            facts.update(python=None, dist=None, version=None, cuda=None)
        if wheelhouse:
            seen = facts.pop("wheelhouse", {})
            try:
                install["requirement"] = torch_source.wheelhouse_pin(
                    seen.get("names") or [],
                    str(install["torch"]),
                    str(install["variant"]),
                    str(install.get("pypi_variant") or ""),
                    settings,
                )
            except torch_source.TorchSourceError as exc:
                unread = "; ".join(seen.get("errors") or [])
                raise AnsibleActionFail(
                    f"{node}: {exc}" + (f" (could not read: {unread})" if unread else "")
                ) from None
        problems = torch_source.found_problems(
            facts, install, str(args["python_version"]), do_import
        )
        if do_import and facts.get("import_error"):
            problems.insert(0, f"import torch failed: {facts['import_error']}")
        result.update(
            changed=False,
            found=facts,
            problems=problems,
            converged=not problems,
            install=install,
        )
        return result
