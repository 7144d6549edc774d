"""gpufleet.core.node_job: start a detached job on a node, or wait for it, in one plain
command each (no module shipped, no async wrapper; gpufleet.verify.detached_job has the scripts).

    - gpufleet.core.node_job:
        state: start
        dir: /var/lib/gpufleet/verify/<run>/<node>/.jobs
        name: allreduce
        argv: [python, -m, gpufleet.verify.workers.supervise, ...]

    - gpufleet.core.node_job:
        state: wait
        dir: /var/lib/gpufleet/verify/<run>/<node>/.jobs
        name: allreduce
        max_wait: 360                     # seconds; then the job's group is stopped
        pidfiles: [<run dir>/allreduce.pid]   # more process groups to clean up after it

start returns ``pid`` and ``started_at`` (seconds since the epoch by the node's clock, None
if the node printed none); with ``ready_file`` (and ``ready_wait`` seconds, default 60) it
returns only once the job created that file, ended or the time passed, and ``ready`` says
which (None without ``ready_file``); it fails when the node could not start the job (the
reason from the node). wait never fails by itself: it returns ``rc`` (the job's exit status,
-1 when there is none), ``finished``, ``state`` (done, timeout, lost, never-started),
``msg``, ``stdout``, ``stderr`` and their ``_lines`` (as async_status did), and ``killed``
(the process groups it had to stop; ``changed`` when there were any). A node that cannot be
reached is unreachable, as with any task.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    env_argv,
    gpufleet_required_by,
    output_tail,
    require_args,
    run_plain,
    task_environment,
)

_NAME = "gpufleet.core.node_job"


def _seconds(args: dict[str, Any], key: str, default: int, why: str) -> int:
    """A positive whole number of seconds from the task's ``key`` (``default`` when unset)."""
    try:
        value = int(args.get(key) or default)
    except (TypeError, ValueError):
        raise AnsibleActionFail(f"{_NAME}: {key} must be an integer") from None
    if value <= 0:
        raise AnsibleActionFail(f"{_NAME}: {why}")
    return value


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        {"state", "dir", "name", "argv", "max_wait", "pidfiles", "ready_file", "ready_wait"}
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        require_args(_NAME, args, ("state", "dir", "name"))
        with gpufleet_required_by(_NAME):
            from gpufleet.verify import detached_job as nodejob
        state = str(args["state"])
        name = str(args["name"])
        if "/" in name or name in (".", ".."):
            raise AnsibleActionFail(f"{_NAME}: name must be a plain file name, got {name!r}")
        host = str(task_vars.get("inventory_hostname", "?"))
        if getattr(getattr(self, "_play_context", None), "check_mode", False):
            result.update(skipped=True, msg=f"{_NAME} starts and waits for nothing in check mode")
            return result
        if state == "start":
            argv = args.get("argv")
            if not isinstance(argv, list) or not argv:
                raise AnsibleActionFail(f"{_NAME}: state start needs argv, a non-empty list")
            # the task's environment (verify's GPUFLEET_RUN_ID), as a module would get it: a
            # plain command does not, so the job starts under env(1), inside the start script
            prefix = env_argv(task_environment(self, _NAME))
            ready: list[str] = []
            if args.get("ready_file"):
                ready_wait = _seconds(args, "ready_wait", 60, "ready_wait must be > 0 (seconds)")
                ready = ["--ready", str(args["ready_file"]), str(ready_wait)]
            res = run_plain(
                self,
                _NAME,
                ["sh", "-c", nodejob.START_SCRIPT, "node-job", str(args["dir"]), name]
                + ready
                + prefix
                + [str(a) for a in argv],
                env=False,
            )
            pid = nodejob.started_pid(res.get("stdout") or "")
            if res.get("rc") != 0 or pid is None:
                why = output_tail(res, 500)
                rc = res.get("rc")
                raise AnsibleActionFail(
                    f"{host}: cannot start the job {name} (rc {rc}: {why or 'no output'})"
                )
            out = res.get("stdout") or ""
            result.update(
                changed=True,
                pid=pid,
                started_at=nodejob.started_at(out),
                ready=nodejob.became_ready(out),
            )
            return result
        if state == "wait":
            max_wait = _seconds(args, "max_wait", 0, "state wait needs max_wait > 0 (seconds)")
            pidfiles = [str(p) for p in (args.get("pidfiles") or [])]
            res = run_plain(
                self,
                _NAME,
                ["sh", "-c", nodejob.WAIT_SCRIPT, "node-wait", str(args["dir"]), name]
                + [str(max_wait)]
                + pidfiles,
                env=False,
            )
            out = nodejob.parse_wait(res.get("stdout") or "")
            if res.get("rc") != 0 and not out["finished"]:
                out["msg"] = (
                    f"{out['msg']} (wait rc {res.get('rc')}: {output_tail(res, 300, stdout=False)})"
                )
            result.update(out)
            # rc is the job's: not this task's verdict (Ansible fails a result whose rc is
            # not 0 unless it says otherwise); the caller decides from rc and state
            result["failed"] = False
            result["changed"] = bool(out["killed"])
            return result
        raise AnsibleActionFail(f"{_NAME}: state must be start or wait, got {state!r}")
