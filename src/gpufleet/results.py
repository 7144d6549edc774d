"""Machine-readable result records shared by checks/, smoke_tests/ and the cluster report.

Every JSON file gpufleet writes on a node has the same envelope::

    {"schema": 1, "kind": "checks" | "smoke", "node": "...", "mode": "gpu" | "cpu",
     "started": "...Z", "duration_s": 1.2, "records": [Record...], "bandwidth": [BandwidthRow...]}

A Record carries node, name, status (pass/warn/fail/skip), value, threshold, remedy and gpu
(index + PCI bus id when the record is about one GPU). Bandwidth rows carry size_bytes,
count, dtype, time_us, algbw, busbw (GB/s, 10^9), world_size, backend and wrong
(elements that did not match the expected sum).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["pass", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip")
SCHEMA = 1


@dataclass(frozen=True)
class Record:
    """One check or test verdict."""

    name: str
    status: Status
    node: str = ""
    value: Any = None
    threshold: Any = None
    remedy: str = ""
    message: str = ""
    gpu: str | None = None  # e.g. "0 (00000000:3B:00.0)"

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BandwidthRow:
    """One all-reduce size of a sweep, the way nccl-tests prints it."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw: float  # GB/s, 10^9 bytes
    busbw: float  # GB/s
    world_size: int
    backend: str
    wrong: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


RUN_ID_ENV = "GPUFLEET_RUN_ID"


@dataclass
class ResultFile:
    """The envelope written by one suite on one node."""

    kind: str
    node: str
    mode: str
    started: str
    duration_s: float = 0.0
    records: list[Record] = field(default_factory=list)
    bandwidth: list[BandwidthRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    #: The verify run that wrote the file: GPUFLEET_RUN_ID, which verify sets for every
    #: command it starts on a node. The report refuses a file of another run (a stale one).
    run_id: str | None = field(default_factory=lambda: os.environ.get(RUN_ID_ENV) or None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "kind": self.kind,
            "node": self.node,
            "mode": self.mode,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "meta": self.meta,
            "records": [r.to_dict() for r in self.records],
            "bandwidth": [b.to_dict() for b in self.bandwidth],
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        return write_json_atomic(path, self.to_dict())


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write JSON so that a reader never sees a half-written file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, 0o644)  # reports are read by the controller's user, not only root
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_result_file(path: str | os.PathLike[str]) -> ResultFile:
    """Read a file written by ResultFile.write (unknown keys are ignored)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: unsupported result schema {data.get('schema')!r}")
    known = set(Record.__dataclass_fields__)
    bknown = set(BandwidthRow.__dataclass_fields__)
    return ResultFile(
        kind=data["kind"],
        node=data["node"],
        mode=data["mode"],
        started=data["started"],
        duration_s=float(data.get("duration_s", 0.0)),
        meta=dict(data.get("meta", {})),
        run_id=data.get("run_id"),
        records=[Record(**{k: v for k, v in r.items() if k in known}) for r in data["records"]],
        bandwidth=[
            BandwidthRow(**{k: v for k, v in b.items() if k in bknown})
            for b in data.get("bandwidth", [])
        ],
    )
