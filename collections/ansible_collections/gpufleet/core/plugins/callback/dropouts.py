"""Why each verify node dropped out of the run: the task that failed and its error.

A node whose step fails leaves ``ansible_play_hosts`` at once, and Ansible keeps no record
of that failure a later task could read. This callback notes, per host, the first failure
that was neither ignored nor rescued (and every unreachable host), and writes them as
``{host: "<task>: <error>"}`` to ``dropouts.json`` in the run's report directory, which it
learns from the ``__verify_report_run`` fact that verify's prepare step sets. The report
step reads that file (roles/verify/tasks/report.yml).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: dropouts
type: aggregate
short_description: Record why each verify node dropped out (failed task and error)
description:
  - Writes C(dropouts.json) into the verify run's report directory (the
    C(__verify_report_run) fact), one entry per host that failed or was unreachable, naming
    the task and its error. Failures that are ignored or rescued are not recorded.
  - Enabled in the repository's ansible.cfg (C(callbacks_enabled)).
requirements:
  - enabled in callbacks_enabled
"""

MAX_REASON = 600


def _rescued(task: Any) -> bool:
    """True when a block around ``task`` has a rescue section (the failure is handled)."""
    parent = getattr(task, "_parent", None)
    while parent is not None:
        if getattr(parent, "rescue", None):
            return True
        parent = getattr(parent, "_parent", None)
    return False


def reason(task_name: str, result: dict[str, Any]) -> str:
    """``<task>: <msg> | <last stderr line>`` (items of a loop: their messages)."""
    parts = [str(result.get("msg") or "").strip()]
    stderr = str(result.get("stderr") or "").strip()
    if stderr:
        parts.append(stderr.splitlines()[-1])
    for item in result.get("results") or []:
        if isinstance(item, dict) and item.get("failed"):
            parts.append(str(item.get("msg") or "").strip())
    text = " | ".join(dict.fromkeys(p for p in parts if p)) or "failed"
    return f"{task_name}: {' '.join(text.split())}"[:MAX_REASON]


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.core.dropouts"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._report_dir = ""
        self._dropped: dict[str, str] = {}

    def v2_runner_on_ok(self, result: Any) -> None:
        facts = result._result.get("ansible_facts") or {}
        run = facts.get("__verify_report_run")
        if isinstance(run, str) and run and run != self._report_dir:
            self._report_dir, self._dropped = run, {}

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if ignore_errors or _rescued(result._task):
            return
        self._note(result._host.get_name(), reason(result._task.get_name(), result._result))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        msg = str(result._result.get("msg") or "").strip()
        self._note(result._host.get_name(), f"unreachable ({result._task.get_name()}): {msg}")

    def _note(self, host: str, text: str) -> None:
        if not self._report_dir or host in self._dropped:
            return
        self._dropped[host] = text
        try:
            os.makedirs(self._report_dir, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".dropouts.", dir=self._report_dir)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self._dropped, fh, indent=2, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, os.path.join(self._report_dir, "dropouts.json"))
        except OSError as exc:
            self._display.warning(f"gpufleet.core.dropouts: cannot write {self._report_dir}: {exc}")
