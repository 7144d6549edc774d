"""When a failed health pass takes a node out of service (``gpufleet health --slurm``).

A node is drained after ``drain_after`` failed passes in a row (default 2: one bad reading,
a check that flaps once, does not empty a node of its jobs), at once when the pass finds a
critical Xid or a lost GPU (:data:`AT_ONCE`: the GPU is gone or must be reset, jobs on it will
fail anyway), and never on a pass that could not finish (incomplete: gpufleet.node.pass_state
does not count it). Drain storms (GCP's cluster-health-scanner, mej/nhc #134) are what this
prevents: a node leaves service on a repeated or an unambiguous failure only.

Which drain is gpufleet's, and that an admin's drain is never touched, is
gpufleet.verify.launchers.slurm.health_action's job; this module only says whether the
failure is due.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.node.health.names import GPU_COUNT, GPU_READABLE, XID
from gpufleet.results import Record

DEFAULT_DRAIN_AFTER = 2
#: Checks whose failure drains at the first failed pass: a critical Xid in the kernel log,
#: a GPU NVML cannot read (fallen off the bus), fewer GPUs than the node must have.
AT_ONCE: frozenset[str] = frozenset({XID, GPU_READABLE, GPU_COUNT})


@dataclass(frozen=True)
class DrainDecision:
    """Whether this pass's failure drains the node, and why (or why not yet)."""

    due: bool
    why: str


def decide(records: Iterable[Record], failed_passes: int, drain_after: int) -> DrainDecision:
    """The decision for a pass with ``records``, ``failed_passes`` in a row counting it."""
    if drain_after < 1:
        raise ValueError(f"drain_after must be at least 1, got {drain_after}")
    failed = list(dict.fromkeys(r.name for r in records if r.status == "fail"))
    if not failed:
        return DrainDecision(False, "no check failed")
    at_once = [name for name in failed if name in AT_ONCE]
    if at_once:
        return DrainDecision(
            True, f"{', '.join(at_once)} failed: a critical Xid or a lost GPU drains at once"
        )
    if failed_passes >= drain_after:
        return DrainDecision(
            True, f"{failed_passes} failed passes in a row (drains after {drain_after})"
        )
    return DrainDecision(
        False,
        f"failed pass {failed_passes} in a row of the {drain_after} that drain "
        f"({', '.join(failed)}); not drained yet",
    )
