"""Verify's tiers: which steps a run takes and the time it is budgeted (docs/verify.md, "Tiers").

* ``quick``: fits a Slurm prolog, at most :data:`QUICK_BUDGET_S` per node: the node checks
  and a short compute and silent-data-corruption pass on every device; no smoke suite and no
  cluster collective (nothing waits for another node);
* ``standard`` (default): what verify ran before the tiers (checks, DCGM when set, smoke,
  pre-check, cluster all-reduce, training, pair sweep, bisection) plus compute per device,
  every collective, silent data corruption and the IB bandwidth per NIC;
* ``burnin``: ``standard``, then every device held busy for ``DURATION`` while NVML is
  sampled (clocks, throttle reasons, temperature, power) and the kernel log read for Xids.

The tiers are the same layers as DCGM's levels (r1 seconds as a readiness gate, r3 about 15
minutes for acceptance; acceptance facts §5). The budget is what the report compares the
run's wall time with (summary.json ``tier``): over it, a warning names the tier and the time.
The verify role reads the table through the filter ``gpufleet.core.verify_tier``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.errors import RefusedError

#: a Slurm prolog's time per node (the issue's bound; NHC's own default is 30 s, too short
#: for torch: acceptance facts §5)
QUICK_BUDGET_S = 60
#: the standard tier's budget for the whole run (the testbed's 3 nodes take well under it;
#: docs/performance.md has the measured times)
STANDARD_BUDGET_S = 900
#: what the burn-in tier adds beyond its DURATION: starting the devices, the sweep first
BURNIN_OVERHEAD_S = 120


@dataclass(frozen=True)
class Tier:
    """One tier: its steps (the verify role's switches) and its budget in seconds."""

    name: str
    what: str
    smoke: bool
    cluster: bool  # pre-check, all-reduce, collectives, training, pairs, bisection, IB pairs
    compute: bool
    burnin: bool
    budget_s: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


NAMES = ("quick", "standard", "burnin")


def tier(name: str, duration_s: int = 0) -> Tier:
    """The tier called ``name``; ``duration_s``: the burn-in's DURATION (burnin only, > 0)."""
    if name == "quick":
        return Tier(
            name,
            "node checks, compute and SDC per device; no smoke, no cluster "
            "collective (a Slurm prolog)",
            False,
            False,
            True,
            False,
            QUICK_BUDGET_S,
        )
    if name == "standard":
        return Tier(
            name,
            "checks, smoke, cluster all-reduce, every collective, training, "
            "pair sweep, compute and SDC per device, IB per NIC",
            True,
            True,
            True,
            False,
            STANDARD_BUDGET_S,
        )
    if name == "burnin":
        if duration_s <= 0:
            raise RefusedError(
                "verify_burnin_duration must be set for the burnin tier -> allowed: a duration "
                "such as 30m (make verify TIER=burnin DURATION=30m)"
            )
        return Tier(
            name,
            f"standard, then every device busy for {duration_s} s with clocks, "
            "throttle reasons, temperature, power and Xids sampled",
            True,
            True,
            True,
            True,
            STANDARD_BUDGET_S + duration_s + BURNIN_OVERHEAD_S,
        )
    raise RefusedError(f"verify_tier={name!r} is refused -> allowed: {', '.join(NAMES)}")
