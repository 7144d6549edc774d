"""The pair schedule: which node pairs run a two-node all-reduce together, round by round.

A slow node drags every collective it joins, so a cluster run only says "slow"; two-node
runs say who. The nodes are taken as a ring in the given order and every ring edge
``(node i, node i+1)`` is one pair: each node is in exactly two pairs (with its two
neighbours), so a slow node shows in both of its pairs while one slow link shows in one.
The edges are split into rounds of disjoint pairs (a node runs one test at a time):

- even node count: two rounds, the even edges ``(0,1) (2,3) ...`` then the odd ones
  ``(1,2) (3,4) ... (n-1,0)``;
- odd node count: three rounds, the same two without the closing edge, then ``(n-1, 0)``
  alone.

So the number of rounds is at most 3 whatever the node count (n pairs in all, n/2 at a
time), against n-1 rounds for every pair. Two nodes make one pair (one round); fewer make
none.
"""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[str, str]


def pair_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """The rounds of disjoint pairs for ``nodes`` (distinct names, in ring order)."""
    ring = list(nodes)
    if len(set(ring)) != len(ring):
        dup = sorted({n for n in ring if ring.count(n) > 1})
        raise ValueError(f"pair schedule: node(s) named twice: {', '.join(dup)}")
    n = len(ring)
    if n < 2:
        return []
    if n == 2:
        return [[(ring[0], ring[1])]]
    edges = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    return [edges[0 : n - 1 : 2], edges[1 : n - 1 : 2], [edges[n - 1]]]


def pairs_of(nodes: Sequence[str]) -> dict[str, list[Pair]]:
    """Each node's pairs in the schedule (two per node from three nodes on)."""
    out: dict[str, list[Pair]] = {n: [] for n in nodes}
    for rnd in pair_rounds(nodes):
        for a, b in rnd:
            out[a].append((a, b))
            out[b].append((a, b))
    return out


def pair_kinds(rounds: Sequence[Sequence[Sequence[str]]], prefix: str) -> dict[str, list[str]]:
    """The result kind of each pair of ``rounds`` (``<prefix>-<round>-<index>``, rounds from
    1) and the node expected to write it: the pair's first (verify's IB step: the client)."""
    return {
        f"{prefix}-{r}-{i}": [str(pair[0])]
        for r, rnd in enumerate(rounds, start=1)
        for i, pair in enumerate(rnd)
    }
