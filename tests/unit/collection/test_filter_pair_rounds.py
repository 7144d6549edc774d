"""The pair sweep's filter (gpufleet.core.pair_rounds): verify's rounds of disjoint pairs."""

from __future__ import annotations

from itertools import chain
from typing import Any

import pytest

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.gpufleet.core.plugins.filter import verify as V  # noqa: E402


@pytest.mark.parametrize("n", [3, 4, 5, 8, 9])
def test_every_node_is_in_two_pairs_and_no_node_twice_in_a_round(n: int) -> None:
    nodes = [f"node{i}" for i in range(1, n + 1)]
    rounds = V.FilterModule().filters()["pair_rounds"](nodes)
    assert len(rounds) <= 3
    for rnd in rounds:
        members = list(chain.from_iterable(rnd))
        assert len(members) == len(set(members)), rnd
    count = dict.fromkeys(nodes, 0)
    for a, b in chain.from_iterable(rounds):
        count[a] += 1
        count[b] += 1
    assert set(count.values()) == {2}


def test_two_nodes_make_one_pair_and_one_makes_none() -> None:
    f = V.FilterModule().filters()["pair_rounds"]
    assert f(["a", "b"]) == [[["a", "b"]]]
    assert f(["a"]) == []


@pytest.mark.parametrize("bad", ["node1", ["node1", 2], ["a", "a"]])
def test_what_is_not_a_list_of_distinct_names_is_refused(bad: Any) -> None:
    with pytest.raises(AnsibleFilterError, match=r"list of node names|named twice"):
        V.FilterModule().filters()["pair_rounds"](bad)
