"""Node verdicts in node_exporter's textfile format, for Prometheus.

node_exporter's textfile collector reads ``*.prom`` files from the folder named by
``--collector.textfile.directory`` (https://github.com/prometheus/node_exporter#textfile-collector)
in the Prometheus text exposition format
(https://prometheus.io/docs/instrumenting/exposition_formats/). One gauge per check and
state, 1 for the state the check is in and 0 for the others, so an alert can read
``gpufleet_check_state{state="fail"} == 1``::

    # HELP gpufleet_check_state gpufleet node check state (1: the check is in this state)
    # TYPE gpufleet_check_state gauge
    gpufleet_check_state{check="gpu_count",state="fail"} 1

A per-GPU check is in its worst state over the GPUs (fail, incomplete, warn, pass, skip).
The file is written to a temporary file in the same folder and renamed over the old one, so
the collector never reads half a file (the collector's own advice).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from gpufleet.results import STATUSES, Record, Status

STATE = "gpufleet_check_state"
LAST_RUN = "gpufleet_check_last_run_timestamp_seconds"
#: Worst first: the state a check with several records (one per GPU) is in.
SEVERITY: tuple[Status, ...] = ("fail", "incomplete", "warn", "pass", "skip")


def _label(value: str) -> str:
    """A label value, escaped as the exposition format wants (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_states(records: Iterable[Record]) -> dict[str, Status]:
    """Check name -> its worst state, in the order the checks first appear."""
    out: dict[str, Status] = {}
    for r in records:
        have = out.get(r.name)
        if have is None or SEVERITY.index(r.status) < SEVERITY.index(have):
            out[r.name] = r.status
    return out


def render(records: Iterable[Record], timestamp: float) -> str:
    """The textfile: every state of every check, and when the checks ran (Unix seconds)."""
    lines = [
        f"# HELP {STATE} gpufleet node check state (1: the check is in this state)",
        f"# TYPE {STATE} gauge",
    ]
    for check, state in check_states(records).items():
        for s in STATUSES:
            value = 1 if s == state else 0
            lines.append(f'{STATE}{{check="{_label(check)}",state="{s}"}} {value}')
    lines += [
        f"# HELP {LAST_RUN} when gpufleet health last judged this node (Unix time)",
        f"# TYPE {LAST_RUN} gauge",
        f"{LAST_RUN} {timestamp:.3f}",
    ]
    return "\n".join(lines) + "\n"


def write(path: str | os.PathLike[str], records: Iterable[Record], timestamp: float) -> Path:
    """Write :func:`render` to ``path`` atomically (temporary file + rename, mode 0644)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render(records, timestamp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
