"""The controller's cost of one more node, as a fraction of the same run's 1-node cost: a
figure that holds on any machine of a kind (`make bench`, docs/scale.md).

The CPU-s the controller spends per added node ((3 nodes - 1 node) / 2) scale with the
machine: on a machine ~1.5x slower throughout, a run measured 1.46 and 1.71 CPU-s where the
reference run measured 0.94 and 1.28, and both missed absolute targets of 1.0 and 1.5. The
shape is the same on both (3-node / 1-node controller CPU 1.82 vs 1.79 for provisioning,
1.61 vs 1.70 for verify), so the verdict is on the marginal cost over the 1-node cost of the
same run, and the CPU-s stay beside it as information.

Targets: the absolute targets of issue 32 over the reference run's 1-node costs (2026-12-06:
provisioning 2.30 CPU-s, verify's cluster step 3.63 CPU-s): 1.0 / 2.30 = 0.43 -> <= 0.45,
1.5 / 3.63 = 0.41 -> <= 0.40 (rounded so the verify figure keeps its margin: 0.35 measured).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

FRACTION_TARGETS = {
    "provision_controller_fraction_per_added_node": ("<=", 0.45),
    "verify_controller_fraction_per_added_node": ("<=", 0.40),
}


def fraction(one_node: Sequence[float], three_nodes: Sequence[float]) -> dict[str, float]:
    """Controller CPU-s of 1-node and 3-node runs (A/B pairs) -> the CPU-s per added node
    ((3 - 1) / 2 of the medians), the 1-node median, and their fraction."""
    one = float(statistics.median(one_node))
    three = float(statistics.median(three_nodes))
    per_node = (three - one) / 2
    return {
        "one_node_cpu_s": one,
        "three_nodes_cpu_s": three,
        "cpu_s_per_added_node": per_node,
        "fraction": per_node / one if one > 0 else float("inf"),
    }


def fractions(figures: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """From `make bench`'s figures (bench.json "figures"): provisioning's converged rerun and
    verify's cluster step."""
    ps = figures["provision_scale"]
    vo = figures["verify_overhead"]["controller_cpu_s"]
    return {
        "provision_controller_fraction_per_added_node": fraction(
            [x["controller_cpu_s"] for x in ps["one_node"]],
            [x["controller_cpu_s"] for x in ps["three_nodes"]],
        ),
        "verify_controller_fraction_per_added_node": fraction(vo["one"], vo["three"]),
    }


def verdict(name: str, value: float) -> str:
    op, target = FRACTION_TARGETS[name]
    ok = value <= target if op == "<=" else value >= target
    return "met" if ok else "MISSED"
