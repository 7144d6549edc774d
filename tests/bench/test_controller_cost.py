"""tests/bench/controller_cost.py: the portable controller cost, judged on recorded runs of
two machines of the same kind (one ~1.5x slower throughout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.controller_cost import FRACTION_TARGETS, fraction, fractions, verdict

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("record", ["bench-2026-12-06.json", "bench-2026-12-06-run2.json"])
def test_the_reference_runs_meet_the_fractions(record: str) -> None:
    figures = json.loads((REPO / "docs" / "measurements" / record).read_text())["figures"]
    got = fractions(figures)
    prov = got["provision_controller_fraction_per_added_node"]
    ver = got["verify_controller_fraction_per_added_node"]
    # the CPU-s per added node the record says, recomputed from its samples
    assert prov["cpu_s_per_added_node"] == pytest.approx(
        figures["provision_scale"]["controller_cpu_s_per_added_node"]
    )
    assert 0.38 < prov["fraction"] < 0.43 and 0.33 < ver["fraction"] < 0.36
    assert {verdict(k, v["fraction"]) for k, v in got.items()} == {"met"}


def test_a_slower_machine_of_the_kind_meets_them_too() -> None:
    """The other machine (issue 44): 1-node reruns 3.3-3.8 CPU-s and 1.46 CPU-s per added
    node (provisioning); verify 1.71 CPU-s per added node with a 1-node cost ~1.5x the
    reference's 3.63. Absolute targets (1.0, 1.5) missed both; the fractions do not."""
    prov = fraction([3.3, 3.8], [3.3 + 2 * 1.46, 3.8 + 2 * 1.46])
    ver = fraction([5.3, 5.6], [5.3 + 2 * 1.71, 5.6 + 2 * 1.71])
    assert prov["cpu_s_per_added_node"] > 1.0 and ver["cpu_s_per_added_node"] > 1.5
    assert verdict("provision_controller_fraction_per_added_node", prov["fraction"]) == "met"
    assert verdict("verify_controller_fraction_per_added_node", ver["fraction"]) == "met"


def test_a_superlinear_controller_misses() -> None:
    """A controller that pays 3x the 1-node cost for 3 nodes (every node costs a full node,
    the n x n term of 2026-12-05 would look like this) misses both targets."""
    for name, (_, target) in FRACTION_TARGETS.items():
        bad = fraction([2.0, 2.0], [6.0, 6.2])
        assert bad["fraction"] > target
        assert verdict(name, bad["fraction"]) == "MISSED"
