"""gpufleet.report.pairs: rounds of disjoint pairs, each node in two pairs, at most 3 rounds."""

from __future__ import annotations

import pytest

from gpufleet.report import pairs


@pytest.mark.parametrize("n", [*range(3, 41), 999, 1000])
def test_every_node_in_two_pairs_of_disjoint_rounds(n: int) -> None:
    nodes = [f"node{i:04d}" for i in range(n)]
    rounds = pairs.pair_rounds(nodes)
    assert len(rounds) == (2 if n % 2 == 0 else 3)
    for rnd in rounds:
        members = [x for p in rnd for x in p]
        assert len(members) == len(set(members)), "a node in two pairs of one round"
    every = [p for rnd in rounds for p in rnd]
    assert len(every) == len({frozenset(p) for p in every}) == n  # no pair twice
    assert all(a != b for a, b in every)
    assert {len(ps) for ps in pairs.pairs_of(nodes).values()} == {2}


def test_the_pairs_are_ring_neighbours() -> None:
    assert pairs.pair_rounds(["a", "b", "c", "d", "e"]) == [
        [("a", "b"), ("c", "d")],
        [("b", "c"), ("d", "e")],
        [("e", "a")],
    ]


def test_small_and_bad_inputs() -> None:
    assert pairs.pair_rounds([]) == []
    assert pairs.pair_rounds(["a"]) == []
    assert pairs.pair_rounds(["a", "b"]) == [[("a", "b")]]
    with pytest.raises(ValueError, match="named twice: b"):
        pairs.pair_rounds(["a", "b", "b"])
