"""gpufleet.core.fetch_results: a node's verify result files into the controller's report
folder in one round trip, and the node's verify lock given back in the same one.

    - gpufleet.core.fetch_results:
        python: /opt/gpufleet/env/bin/python     # the env that has gpufleet
        run_dir: /var/lib/gpufleet/verify/<run>/<node>
        dest: reports/<run>/<node>/
        patterns: ["*.json", "*.xml", "*.log"]
        excludes: ["probe-raw.json"]
        lock: /var/lib/gpufleet/verify/.lock.<node>   # optional
        run_id: <run>                                  # with lock

It runs ``python -m gpufleet.verify.result_pack pack`` on the node as one command (no module, no
per-file copy) and unpacks its answer with :func:`gpufleet.verify.result_pack.unpack`, which checks
every file again on this side (plain names the patterns select, regular files, size).
Returns ``files`` (written), ``skipped`` (left on the node, why), ``refused`` (in the answer
but not written, why) and ``released`` (the lock was this run's and is gone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    gpufleet_argv,
    gpufleet_required_by,
    require_args,
    run_plain,
)

_NAME = "gpufleet.core.fetch_results"
_REQUIRED = ("python", "run_dir", "dest", "patterns")


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"python", "run_dir", "dest", "patterns", "excludes", "lock", "run_id"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        require_args(_NAME, args, _REQUIRED)
        with gpufleet_required_by(_NAME):
            from gpufleet.verify import result_pack as resultpack
        patterns = [str(p) for p in args["patterns"]]
        excludes = [str(p) for p in args.get("excludes") or []]
        argv = gpufleet_argv(args["python"], "verify.result_pack", "pack", str(args["run_dir"]))
        argv += [f"--pattern={p}" for p in patterns] + [f"--exclude={x}" for x in excludes]
        if args.get("lock") and args.get("run_id"):
            argv += [f"--lock={args['lock']}", f"--run-id={args['run_id']}"]
        host = task_vars.get("inventory_hostname", "?")
        res = run_plain(self, _NAME, argv, env=False)
        if res.get("rc") != 0:
            err = (res.get("stderr") or res.get("stdout") or "").strip().splitlines()
            return {
                **result,
                "failed": True,
                "rc": res.get("rc"),
                "msg": (
                    f"{host}: cannot pack the results of {args['run_dir']} with {args['python']} "
                    f"(rc {res.get('rc')}: {err[-1] if err else 'no output'}) -> check that "
                    "gpufleet is installed in that env (make provision)"
                ),
            }
        try:
            obj = resultpack.parse(res.get("stdout") or "")
            got = resultpack.unpack(obj, Path(str(args["dest"])), patterns, excludes)
        except resultpack.PackError as exc:
            return {**result, "failed": True, "msg": f"{host}: {exc}"}
        except OSError as exc:
            return {
                **result,
                "failed": True,
                "msg": f"cannot write {host}'s results into {args['dest']}: {exc}",
            }
        if got.refused:
            result.setdefault("warnings", []).append(
                f"{host}: files not written: "
                + "; ".join(f"{r['name']!r} ({r['why']})" for r in got.refused)
            )
        if got.skipped:
            result.setdefault("warnings", []).append(
                f"{host}: files left on the node: "
                + "; ".join(f"{s.get('name')!r} ({s.get('why')})" for s in got.skipped)
            )
        result.update(
            changed=bool(got.written) or got.released,
            files=got.written,
            skipped=got.skipped,
            refused=got.refused,
            released=got.released,
        )
        return result
