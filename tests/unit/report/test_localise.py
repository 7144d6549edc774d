"""gpufleet.report.localise: bisection names the bad node in O(log n) launches.

The cluster is simulated by an oracle (which groups fail) for every size up to 40 and every
position of the bad node; the properties are what the verify step relies on."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from gpufleet.report import localise

Oracle = Callable[[list[str]], bool]  # group -> passed


def run(nodes: list[str], passes: Oracle) -> tuple[localise.Localisation, int, int]:
    history: list[list[dict[str, object]]] = []
    launches = 0
    while groups := localise.next_groups(nodes, history):
        for g in groups:
            assert len(g) >= 2 and len(set(g)) == len(g)
        members = [x for g in groups for x in g]
        assert len(members) == len(set(members)), f"a node in two groups of a round: {groups}"
        assert len(groups) <= 2
        history.append([{"nodes": g, "passed": passes(g)} for g in groups])
        launches += len(groups)
        assert len(history) <= localise.max_rounds(len(nodes)), "more rounds than the bound"
    return localise.localise(nodes, history), launches, len(history)


def without(bad: str) -> Oracle:
    """A cluster where every group holding ``bad`` fails."""
    return lambda g: bad not in g


@pytest.mark.parametrize("n", range(3, 41))
def test_one_bad_node_is_named_in_log_n_launches(n: int) -> None:
    nodes = [f"node{i}" for i in range(1, n + 1)]
    for bad in nodes:
        state, launches, rounds = run(nodes, without(bad))
        assert state.suspects == [bad], (n, bad, state)
        assert rounds <= math.ceil(math.log2(n)), (n, bad, rounds)
        assert launches <= 2 * math.ceil(math.log2(n)), (n, bad, launches)


def test_twelve_nodes_take_four_rounds_and_at_most_eight_launches() -> None:
    nodes = [f"node{i}" for i in range(1, 13)]
    worst = max(run(nodes, without(b))[1] for b in nodes)
    assert worst <= 8  # ring pairs: 12 launches


def test_two_bad_nodes_in_different_halves_are_both_suspected() -> None:
    nodes = [f"n{i}" for i in range(8)]
    state, launches, _ = run(nodes, lambda g: "n1" not in g and "n6" not in g)
    assert launches == 2
    assert {"n1", "n6"} <= set(state.suspects)
    assert "more than one node" in state.reason


def test_a_fault_that_needs_both_halves_names_no_node() -> None:
    """A bad link between n0 and n5: every group without both of them passes."""
    nodes = [f"n{i}" for i in range(8)]
    state, launches, _ = run(nodes, lambda g: not {"n0", "n5"} <= set(g))
    assert (state.suspects, launches) == ([], 2)
    assert "needs nodes of both halves" in state.reason


def test_every_group_failing_stops_at_once() -> None:
    state, launches, _ = run([f"n{i}" for i in range(10)], lambda g: False)
    assert launches == 2 and len(state.suspects) == 10


@pytest.mark.parametrize("n", [0, 1, 2])
def test_too_few_nodes_launch_nothing(n: int) -> None:
    assert localise.next_groups([f"n{i}" for i in range(n)], []) == []


def test_max_rounds_grows_with_log_n() -> None:
    assert [localise.max_rounds(n) for n in (3, 12, 100, 1000)] == [3, 5, 8, 11]
