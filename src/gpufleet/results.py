"""Machine-readable result records shared by checks/, smoke_tests/ and the cluster report.

Every JSON file gpufleet writes on a node has the same envelope::

    {"schema": 1, "kind": "checks" | "smoke", "node": "...", "mode": "gpu" | "cpu",
     "started": "...Z", "duration_s": 1.2, "valid_until": "...Z" | null,
     "records": [Record...], "bandwidth": [BandwidthRow...]}

``valid_until`` (ISO 8601 UTC, null: no expiry) is when the verdict stops being news: a
file read later reads as incomplete ("stale", :func:`read_as_of`), the way GCP's
cluster-health-scanner stamps results with a validity period so an old pass expires.

A Record carries node, name, status, value, threshold, remedy and gpu (index + PCI bus id
when the record is about one GPU). The statuses:

* ``pass``, ``warn`` (works, but look at it), ``fail`` (broken: drain, fix);
* ``skip``: cannot run on this node by design (no GPU where none is required, a CPU wheel);
* ``incomplete``: the check could not finish (it timed out, a tool is missing or could not
  run, an NVML call failed transiently, or the result is past its ``valid_until``). Never
  counted as a failure: a check that timed out is not a sick GPU, and draining on it turns a
  slow node into a drain storm (Imbue's Incomplete, gcm's UNKNOWN).

Every warn, fail and incomplete record carries a ``remedy``: what to do next.

Bandwidth rows carry size_bytes, count, dtype, time_us, algbw, busbw (GB/s, 10^9),
world_size, backend, wrong (elements that did not match the expected result) and op (the
collective, ``all_reduce`` unless another).
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any, Literal

from gpufleet.errors import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK

Status = Literal["pass", "warn", "fail", "skip", "incomplete"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip", "incomplete")
#: The statuses that need someone to act, so their records carry a remedy.
NEEDS_REMEDY: frozenset[Status] = frozenset({"warn", "fail", "incomplete"})
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
    """One size of a collective's sweep, the way nccl-tests prints it."""

    size_bytes: int
    count: int
    dtype: str
    time_us: float
    algbw: float  # GB/s, 10^9 bytes
    busbw: float  # GB/s
    world_size: int
    backend: str
    wrong: int = 0
    #: the collective (nccl-tests' name): all_reduce, all_gather, reduce_scatter, alltoall,
    #: broadcast, sendrecv; its busbw factor is gpufleet.verify.bandwidth.BUSBW_FACTORS[op]
    op: str = "all_reduce"

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
    #: ISO 8601 UTC ("...Z"): after it the verdict reads as incomplete (stale); None: never.
    valid_until: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "kind": self.kind,
            "node": self.node,
            "mode": self.mode,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "valid_until": self.valid_until,
            "meta": self.meta,
            "records": [r.to_dict() for r in self.records],
            "bandwidth": [b.to_dict() for b in self.bandwidth],
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        return write_json_atomic(path, self.to_dict())


def flock_acquire(fd: int | IO[str], wait_s: float, interval_s: float) -> bool:
    """Take an exclusive ``flock`` on ``fd``, trying again every ``interval_s`` until
    ``wait_s`` has passed (0: one try); False when another process still holds it. The one
    loop behind the controller's verify lock (gpufleet.verify.verify_run) and the health
    pass's state lock (gpufleet.node.pass_state), which each say who holds it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(interval_s)


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
        valid_until=data.get("valid_until"),
        records=[Record(**{k: v for k, v in r.items() if k in known}) for r in data["records"]],
        bandwidth=[
            BandwidthRow(**{k: v for k, v in b.items() if k in bknown})
            for b in data.get("bandwidth", [])
        ],
    )


def utc_stamp(when: datetime) -> str:
    """``2026-12-05T09:16:07Z``: the envelope's time format (UTC, seconds)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> datetime:
    """An ISO 8601 time of the envelope (``...Z`` or with an offset); naive means UTC."""
    when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def valid_until(start: datetime, hours: float) -> str:
    """The ``valid_until`` stamp of a verdict taken at ``start`` that holds ``hours``."""
    if hours <= 0:
        raise ValueError(f"validity must be > 0 hours, got {hours!r}")
    return utc_stamp(start + timedelta(hours=hours))


def read_as_of(result: ResultFile, now: datetime) -> ResultFile:
    """``result`` as it reads at ``now``: past its ``valid_until`` every record that is not a
    skip turns incomplete ("stale"), naming what it was and when it expired. A file without
    ``valid_until`` never expires."""
    if result.valid_until is None or now <= parse_stamp(result.valid_until):
        return result
    remedy = "rerun the checks on the node (gpufleet health); the last verdict is too old to trust"
    stale = [
        r
        if r.status == "skip"
        else dataclasses.replace(
            r,
            status="incomplete",
            remedy=remedy,
            message=f"stale: this {r.status} verdict was valid until {result.valid_until} "
            f"(read at {utc_stamp(now)}): {r.message}",
        )
        for r in result.records
    ]
    return dataclasses.replace(result, records=stale)


def exit_code(records: Iterable[Record]) -> int:
    """A node command's exit status from its records: 1 (EXIT_FAILED) on any failure, else 3
    (EXIT_INCOMPLETE) when a check could not finish, else 0 (pass, warn and skip)."""
    statuses = {r.status for r in records}
    if "fail" in statuses:
        return EXIT_FAILED
    return EXIT_INCOMPLETE if "incomplete" in statuses else EXIT_OK


# ------------------------------------------------------------------ rerunning one test


#: environment variables a node suite reads besides its options: a rerun sets them again
RERUN_ENV = ("PYTHONPATH", "GPUFLEET_REQUIRE_GPU", "CUDA_VISIBLE_DEVICES")
#: suite options naming the run's own output files: the rerun of one test leaves them out
OUTPUT_OPTIONS = ("--gpufleet-json", "--junitxml")


def record_key(r: Record) -> str:
    """A record's key in ``meta["rerun"]["tests"]``: its name, and its GPU for a per-GPU one
    (``ecc_mode@3 (00000000:5D:00.0)``)."""
    return r.name if r.gpu is None else f"{r.name}@{r.gpu}"


def rerun_meta(
    *,
    python: str,
    cwd: str,
    rootdir: str,
    args: Iterable[str],
    paths: Iterable[str],
    env: Mapping[str, str],
    tests: Mapping[str, str],
) -> dict[str, Any]:
    """How to rerun one test of a suite run on its node (a result file's ``meta["rerun"]``,
    written by the checks and smoke suites): the interpreter, the working directory, the suite's
    options as given (``args``) less its test paths (``paths``) and output files, the variables
    of :data:`RERUN_ENV` that were set, and ``tests``: :func:`record_key` -> pytest node id
    (relative to ``rootdir``) of the records that need someone to act. The report's reproducer
    (gpufleet.report.reproduce) is ``cd CWD && [ENV] PYTHON -m pytest ROOTDIR/NODEID OPTIONS``."""
    given = set(paths)
    options: list[str] = []
    words = iter(args)
    for word in words:
        if word in given:
            continue
        if word in OUTPUT_OPTIONS:
            next(words, None)  # `--junitxml PATH`: its value too
            continue
        if word.startswith(tuple(f"{o}=" for o in OUTPUT_OPTIONS)):
            continue
        options.append(word)
    return {
        "python": python,
        "cwd": cwd,
        "rootdir": rootdir,
        "options": options,
        "env": {k: env[k] for k in RERUN_ENV if k in env},
        "tests": dict(tests),
    }
