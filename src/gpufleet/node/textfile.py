"""A health pass as Prometheus metrics: node_exporter's textfile (``gpufleet health
--textfile``) and the same text on stdout (``--prom``).

node_exporter's textfile collector reads ``*.prom`` files from the folder named by
``--collector.textfile.directory`` (https://github.com/prometheus/node_exporter#textfile-collector)
in the text exposition format
(https://prometheus.io/docs/instrumenting/exposition_formats/), without timestamps on the
samples. Names follow https://prometheus.io/docs/practices/naming/: the ``gpufleet_health_``
prefix, base units (``_seconds``), ``_timestamp_seconds`` for points in time, an ``_info``
gauge of 1 that carries the versions as labels, and only bounded labels (check names, GPU
indexes, Xid numbers; never a run id or a message). docs/monitoring.md lists every metric.

Status values (:data:`STATUS_VALUE`), worse is higher so that ``max`` is the worst:
0 pass, 1 skip, 2 warn, 3 incomplete, 4 fail.

The file is written to a temporary file in the same folder and renamed over the old one, so
the collector never reads half a file (the collector's own advice).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.node.fast_checks import PassFacts
from gpufleet.node.pass_state import PassState
from gpufleet.node.xid import CRITICAL_XIDS
from gpufleet.results import Record, Status

PREFIX = "gpufleet_health_"
CHECK_STATUS = f"{PREFIX}check_status"
STATUS = f"{PREFIX}status"
LAST_RUN = f"{PREFIX}last_run_timestamp_seconds"
LAST_SUCCESS = f"{PREFIX}last_success_timestamp_seconds"
VALID_UNTIL = f"{PREFIX}valid_until_timestamp_seconds"
FAILED_PASSES = f"{PREFIX}consecutive_failed_passes"
SLURM_DRAINED = f"{PREFIX}slurm_drained"
INFO = f"{PREFIX}info"
GPUS = f"{PREFIX}gpus"
GPUS_EXPECTED = f"{PREFIX}gpus_expected"
XID_EVENTS = f"{PREFIX}xid_events"

#: Status -> metric value; worse is higher.
STATUS_VALUE: Mapping[Status, int] = {"pass": 0, "skip": 1, "warn": 2, "incomplete": 3, "fail": 4}
_VALUES = ", ".join(f"{v} {s}" for s, v in STATUS_VALUE.items())

#: The per-GPU figures (gpufleet.node.fast_checks.GpuFigures field -> metric name, help).
GPU_FIGURES: Mapping[str, tuple[str, str]] = {
    "ecc_volatile_uncorrected": (
        f"{PREFIX}gpu_ecc_volatile_uncorrected_errors",
        "uncorrected ECC errors since the driver loaded (NVML volatile count)",
    ),
    "remapped_rows_uncorrectable": (
        f"{PREFIX}gpu_remapped_rows_uncorrectable",
        "memory rows remapped for uncorrectable errors",
    ),
    "retired_pages": (
        f"{PREFIX}gpu_retired_pages",
        "memory pages retired for single- and double-bit errors",
    ),
    "nvlink_inactive": (
        f"{PREFIX}gpu_nvlink_inactive_links",
        "present NVLinks that are not active",
    ),
}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Exposition:
    """What one pass exports: its records, the facts it read, the state after it."""

    records: Sequence[Record]
    ran_at: float  # Unix time the pass started
    state: PassState
    facts: PassFacts | None = None
    duration_s: float | None = None


def _label(value: str) -> str:
    """A label value, escaped as the exposition format wants (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def gpu_index(record: Record) -> str | None:
    """The GPU index of a per-GPU record ("3 (00000000:3B:00.0)" -> "3"); None for the node."""
    return None if record.gpu is None else record.gpu.split(" ", 1)[0]


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of ``statuses`` (pass when there is none)."""
    return max(statuses, key=STATUS_VALUE.__getitem__, default="pass")


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> None:
        """A gauge's HELP and TYPE and its samples; nothing when there is no sample."""
        rows = [
            name
            + ("{" + ",".join(f'{k}="{_label(v)}"' for k, v in labels) + "}" if labels else "")
            + f" {_number(value)}"
            for labels, value in samples
        ]
        if rows:
            self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *rows]


def render(ex: Exposition) -> str:
    """The exposition text of one pass (docs/monitoring.md has the table)."""
    out = _Text()
    checks: list[tuple[Labels, float]] = []
    for r in ex.records:
        gpu = gpu_index(r)
        labels: Labels = (("check", r.name),) + ((("gpu", gpu),) if gpu is not None else ())
        checks.append((labels, STATUS_VALUE[r.status]))
    out.family(CHECK_STATUS, f"gpufleet node check status per check (and GPU): {_VALUES}", checks)
    out.family(
        STATUS,
        f"the worst check status of the last pass: {_VALUES}",
        [((), STATUS_VALUE[worst(r.status for r in ex.records)])],
    )
    st = ex.state
    out.family(LAST_RUN, "when the last gpufleet health pass ran (Unix time)", [((), ex.ran_at)])
    out.family(
        LAST_SUCCESS,
        "when a pass last judged the node, healthy or not (no check incomplete; Unix time)",
        [((), st.last_success)] if st.last_success is not None else [],
    )
    out.family(
        VALID_UNTIL,
        "when the last judgement expires (Unix time): past it, the node's health is unknown",
        [((), st.valid_until)] if st.valid_until is not None else [],
    )
    out.family(
        FAILED_PASSES,
        "failed passes in a row (an incomplete pass neither adds nor resets)",
        [((), st.failed_passes)],
    )
    out.family(
        SLURM_DRAINED,
        "1 when gpufleet's drain holds the node in Slurm, 0 when not (only with --slurm)",
        [((), int(st.drained))] if st.drained is not None else [],
    )
    if ex.duration_s is not None:
        out.family(f"{PREFIX}duration_seconds", "how long the pass took", [((), ex.duration_s)])
    if ex.facts is not None:
        _facts(out, ex.facts)
    return "\n".join(out.lines) + "\n"


def _facts(out: _Text, facts: PassFacts) -> None:
    info: Labels = (
        ("driver", facts.driver),
        ("cuda", facts.cuda),
        ("torch", facts.torch),
        ("torch_cuda", facts.torch_cuda),
        ("profile", facts.profile),
        ("gpufleet", facts.gpufleet),
    )
    out.family(
        INFO,
        "versions on the node: NVIDIA driver, the CUDA it supports, the env's torch and its "
        'CUDA, the system profile, gpufleet ("" = not known)',
        [(info, 1)],
    )
    out.family(GPUS, "GPUs NVML enumerates", [((), facts.gpus)] if facts.gpus is not None else [])
    out.family(
        GPUS_EXPECTED,
        "GPUs the node must have (gpufleet_gpus_expected, else its system profile's count)",
        [((), facts.gpus_expected)] if facts.gpus_expected is not None else [],
    )
    out.family(
        f"{PREFIX}xid_window_seconds",
        "how far back the kernel log is read for Xids",
        [((), facts.xid_window_s)],
    )
    out.family(
        XID_EVENTS,
        "Xid events in the kernel log within the window (critical: they fail the node)",
        [
            ((("xid", str(x)), ("critical", str(x in CRITICAL_XIDS).lower())), n)
            for x, n in sorted(facts.xid_events.items())
        ],
    )
    for attr, (name, help_text) in GPU_FIGURES.items():
        samples: list[tuple[Labels, float]] = []
        for gpu, figures in sorted(facts.gpu_figures.items(), key=lambda kv: int(kv[0])):
            value = getattr(figures, attr)
            if value is not None:
                samples.append(((("gpu", gpu),), value))
        out.family(name, help_text, samples)


def write(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temporary file in the same folder, then rename;
    mode 0644, readable by node_exporter's user)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
