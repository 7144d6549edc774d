"""The end of an Ansible async job, read from the job's results file by one node command.

verify starts torchrun (and the pre-check) as Ansible async jobs and waits for them with one
shell loop per node (roles/verify/tasks/launch_ssh.yml) instead of polling ``async_status``
(a module run per node per second, on the CPUs the ranks measure). The loop prints the
results file once the async wrapper has replaced ``{"started": 1, ...}`` with the module's
result; :func:`job_result` turns that text into what ``async_status`` would have returned,
so the callers read ``rc`` as before. Text that is not a finished result (nothing, a crash
of the wrapper, a job still marked started) gives ``rc`` -1 and says why in ``msg``.
"""

from __future__ import annotations

import json
from typing import Any

#: torchrun's exit status is unknown: the callers treat it as a failed launch.
UNKNOWN_RC = -1


def job_result(text: object) -> dict[str, Any]:
    """The module result in the async results file text (its last non-empty line), with
    ``finished`` 1; ``{"rc": -1, "finished": 0, "msg": why}`` when there is none."""
    lines = [ln for ln in str(text or "").splitlines() if ln.strip()]
    if not lines:
        return {"rc": UNKNOWN_RC, "finished": 0, "msg": "the job left no result"}
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"rc": UNKNOWN_RC, "finished": 0, "msg": f"not a job result: {lines[-1][:300]}"}
    if not isinstance(obj, dict):
        return {"rc": UNKNOWN_RC, "finished": 0, "msg": f"not a job result: {lines[-1][:300]}"}
    if obj.get("started") and "rc" not in obj:
        return {"rc": UNKNOWN_RC, "finished": 0, "msg": "the job was still running"}
    out = dict(obj)
    out["finished"] = 1
    for stream in ("stdout", "stderr"):  # as Ansible adds them to a task's result
        if isinstance(out.get(stream), str) and f"{stream}_lines" not in out:
            out[f"{stream}_lines"] = out[stream].splitlines()
    rc = obj.get("rc")
    out["rc"] = rc if isinstance(rc, int) and not isinstance(rc, bool) else UNKNOWN_RC
    return out
