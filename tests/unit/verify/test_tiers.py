"""gpufleet.verify.tiers: what each tier runs and its budget, and the verify role's filter."""

from __future__ import annotations

import pytest

from gpufleet.errors import RefusedError
from gpufleet.verify import tiers


def test_quick_fits_a_slurm_prolog_without_a_cluster_collective() -> None:
    t = tiers.tier("quick")
    assert (t.smoke, t.cluster, t.compute, t.burnin, t.budget_s) == (False, False, True, False, 60)


def test_standard_runs_everything_but_the_burn_in() -> None:
    t = tiers.tier("standard")
    assert (t.smoke, t.cluster, t.compute, t.burnin) == (True, True, True, False)


def test_burnin_adds_its_duration_to_the_budget() -> None:
    t = tiers.tier("burnin", 1800)
    # docs/verify.md: 900 s (standard) + the duration + 120 s
    assert t.burnin and t.budget_s == 900 + 1800 + 120
    assert "1800 s" in t.what
    with pytest.raises(RefusedError, match="verify_burnin_duration must be set"):
        tiers.tier("burnin", 0)


def test_an_unknown_tier_is_refused_naming_the_variable() -> None:
    with pytest.raises(
        RefusedError, match="verify_tier='fast' is refused -> allowed: quick, standard, burnin"
    ):
        tiers.tier("fast")
