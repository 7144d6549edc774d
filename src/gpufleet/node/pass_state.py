"""What a node keeps from one ``gpufleet health`` pass to the next (``--state``, default
``/var/lib/gpufleet/health-state.json``): how many passes in a row failed, when a pass last
judged the node and until when that verdict holds, and whether gpufleet's drain holds the
node in Slurm.

A pass is **failed** when a check fails, **incomplete** when none fails but one could not
finish (timed out, a tool missing), else **healthy**. A failed pass adds one to
``failed_passes``, a healthy one resets it, an incomplete one leaves it as it was: a pass that
could not judge the node says nothing either way (gpufleet.node.drain_policy drains on the
count, never on an incomplete pass). ``last_success`` is the last pass that judged the node,
healthy or failed; its ``valid_until`` is when that verdict expires (an incomplete pass does
not renew it, so a node whose checks keep hanging lets its verdict expire).

The slurmd health check and the systemd timer (roles slurm_health, health_timer) may both
run passes on one node: each pass takes an exclusive lock (``<state>.lock``, flock) around
reading the state, telling Slurm, writing the state and the textfile, so two passes never
interleave there. The file is replaced atomically (temporary file, then rename); one that
cannot be read (truncated by a full disk, edited by hand) starts the count over and says so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from gpufleet.errors import GpufleetError
from gpufleet.results import Record, flock_acquire, write_json_atomic

DEFAULT_STATE = Path("/var/lib/gpufleet/health-state.json")
SCHEMA = 1
#: How long a pass waits for another pass's lock before it gives up (seconds).
LOCK_WAIT_S = 10.0

Outcome = Literal["healthy", "failed", "incomplete"]


class PassStateError(GpufleetError):
    """The state file's lock could not be opened, or not taken in time."""


def outcome(records: Iterable[Record]) -> Outcome:
    """failed (a check failed), incomplete (none failed, one did not finish) or healthy."""
    statuses = {r.status for r in records}
    if "fail" in statuses:
        return "failed"
    if "incomplete" in statuses:
        return "incomplete"
    return "healthy"


@dataclass(frozen=True)
class PassState:
    """The state after a pass (Unix times in seconds; None: never)."""

    failed_passes: int = 0  # failed passes in a row, this one included
    last_outcome: str = ""  # healthy, failed or incomplete; "" before the first pass
    last_run: float | None = None
    last_success: float | None = None  # the last pass that judged the node (not incomplete)
    valid_until: float | None = None  # when last_success's verdict expires
    drained: bool | None = None  # gpufleet's drain holds the node (None: Slurm not asked)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Any) -> PassState:
        """The state a file holds; ValueError when it is not one."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a gpufleet health state (schema {SCHEMA})")
        failed = data.get("failed_passes")
        if not isinstance(failed, int) or isinstance(failed, bool) or failed < 0:
            raise ValueError(f"failed_passes is {failed!r}, not a count")

        def when(key: str) -> float | None:
            value = data.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key} is {value!r}, not a Unix time")
            return float(value)

        drained = data.get("drained")
        return cls(
            failed_passes=failed,
            last_outcome=str(data.get("last_outcome") or ""),
            last_run=when("last_run"),
            last_success=when("last_success"),
            valid_until=when("valid_until"),
            drained=drained if isinstance(drained, bool) else None,
        )


def advance(
    before: PassState, records: Iterable[Record], now: float, valid_for_s: float
) -> PassState:
    """The state after a pass with ``records`` at ``now`` whose verdict holds ``valid_for_s``."""
    result = outcome(records)
    if result == "incomplete":
        return replace(before, last_outcome=result, last_run=now)
    return replace(
        before,
        failed_passes=before.failed_passes + 1 if result == "failed" else 0,
        last_outcome=result,
        last_run=now,
        last_success=now,
        valid_until=now + valid_for_s,
    )


def load(path: Path) -> tuple[PassState, str]:
    """(state, note): a fresh state when the file does not exist (note ""), or when it cannot
    be read (the note says why, and that the count starts over)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return PassState(), ""
    except OSError as exc:
        return PassState(), f"{path}: {exc.strerror or exc}; the count of failed passes starts over"
    try:
        return PassState.from_dict(json.loads(text)), ""
    except ValueError as exc:
        return PassState(), f"{path} is unreadable ({exc}); the count of failed passes starts over"


def save(path: Path, state: PassState) -> None:
    write_json_atomic(path, state.to_dict())


@contextmanager
def locked(path: Path, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold ``<path>.lock`` (flock, exclusive) for the block; PassStateError when it cannot be
    opened, or after ``wait_s``."""
    lock = path.with_name(path.name + ".lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise PassStateError(
            f"cannot open {lock}: {exc.strerror or exc}; this pass neither counts nor tells "
            "Slurm. Fix: run gpufleet health as root (the timer and slurmd do), or pass "
            "--state FILE in a directory you can write"
        ) from exc
    try:
        if not flock_acquire(fd, wait_s, 0.1):
            raise PassStateError(
                f"another gpufleet health pass has held {lock} for over {wait_s:g}s "
                "(a stuck scontrol?); this pass neither counts nor tells Slurm. Fix: "
                "find it with `fuser -v " + str(lock) + "` and read its log "
                "(journalctl -t gpufleet-health, journalctl -u gpufleet-health)"
            )
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
