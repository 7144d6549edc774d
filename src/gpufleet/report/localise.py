"""Which node breaks the cluster run: bisection in O(log n) launches.

After a failed all-reduce over all N nodes, verify reruns it on halves of the nodes still
suspected. Each round launches at most two groups, concurrently (disjoint nodes): the first
half of the candidates, and the second half, a half of one node padded with a node already
known good (a collective needs two nodes). The outcome narrows the candidates:

- first half fails, second passes (or is too small to be tested): the culprit is in the
  first half, the second half is good (bisection looks for one faulty node; two or more
  show as both halves failing);
- first half passes: it is good; the culprit is in the second half;
- both fail: more than one node is at fault (or something all of them share): stop, all
  candidates suspected;
- both pass: no single node breaks it; the failure needs nodes of both halves (a link
  between them, or the scale of the whole run): stop, nothing named.

So one faulty node among N is named after ceil(log2 N) rounds, at most 2 launches each,
instead of N ring pairs. The schedule is a pure function of the rounds run so far, which
verify's Ansible loop (filter ``gpufleet.core.bisect_groups``) and the report both use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.report.model import Summary

#: One round as run: each tested group and whether it passed.
Round = Sequence[Mapping[str, Any]]


@dataclass
class Localisation:
    candidates: list[str]
    good: list[str] = field(default_factory=list)
    done: bool = False
    suspects: list[str] = field(default_factory=list)
    reason: str = ""


def halves(candidates: Sequence[str]) -> tuple[list[str], list[str]]:
    k = math.ceil(len(candidates) / 2)
    return list(candidates[:k]), list(candidates[k:])


def plan_round(candidates: Sequence[str], good: Sequence[str]) -> list[list[str]]:
    """The groups of the next round (each at least two nodes; disjoint)."""
    spare = list(good)
    groups = []
    for half in halves(candidates):
        need = 2 - len(half)
        if need <= 0:
            groups.append(half)
        elif half and len(spare) >= need:
            groups.append(half + spare[:need])
            spare = spare[need:]
        # else: too small to test alone, inferred from the other half
    return groups


def localise(nodes: Sequence[str], history: Sequence[Round]) -> Localisation:
    """Replay the rounds run so far (the full run over ``nodes`` failed)."""
    state = Localisation(candidates=list(nodes))
    for rnd in history:
        if state.done:
            break
        first, second = halves(state.candidates)
        outcome: dict[str, bool | None] = {"first": None, "second": None}
        for group in rnd:
            members = set(group["nodes"])
            passed = bool(group["passed"])
            if first and set(first) <= members:
                outcome["first"] = passed
            elif second and set(second) <= members:
                outcome["second"] = passed
        a, b = outcome["first"], outcome["second"]
        if a is False and b is False:
            state.done, state.suspects = True, sorted(state.candidates)
            state.reason = "both halves fail: more than one node (or what they share) is at fault"
        elif a is True and b is True:
            state.done, state.suspects = True, []
            state.reason = (
                "both halves pass: no single node breaks the run; it needs nodes of both "
                f"halves ({', '.join(first)} | {', '.join(second)}): a link between them, "
                "or the scale of the whole run"
            )
        elif a is False:
            # the culprit is in the first half; the second (tested or too small to be) is
            # taken as good: one faulty node is what bisection looks for
            state.good += second
            state.candidates = first
        elif a is True:
            state.good += first
            state.candidates = second
        else:  # the first half was not tested: nothing learnt, stop rather than loop
            state.done, state.suspects = True, sorted(state.candidates)
            state.reason = "the candidates could not be tested apart"
        if not state.done and len(state.candidates) <= 1:
            state.done, state.suspects = True, list(state.candidates)
            state.reason = "bisection"
    if not state.done and not plan_round(state.candidates, state.good):
        state.done, state.suspects = True, sorted(state.candidates)
        state.reason = "too few nodes to test apart"
    return state


def next_groups(nodes: Sequence[str], history: Sequence[Round]) -> list[list[str]]:
    """The groups to launch next; [] when the bisection is over."""
    if len(nodes) < 2:
        return []
    state = localise(nodes, history)
    return [] if state.done else plan_round(state.candidates, state.good)


def max_rounds(n: int) -> int:
    """Upper bound on rounds for ``n`` nodes (the Ansible loop's length)."""
    return max(1, math.ceil(math.log2(max(n, 2)))) + 1


def group_kind(round_no: int, index: int) -> str:
    """Result kind (file stem) of group ``index`` of round ``round_no`` (1-based rounds)."""
    return f"bisect-{round_no}-{index}"


def analyse_bisection(s: Summary) -> None:
    """Re-derive each group's verdict from its result files, then name the suspects."""
    rounds = s.run_info.get("bisect", [])
    if not rounds:
        return
    history: list[list[dict[str, Any]]] = []
    launches = 0
    for r, groups in enumerate(rounds, 1):
        done = []
        for i, nodes in enumerate(groups):
            kind = group_kind(r, i)
            ok: bool | None = None
            for n in nodes:
                nr = s.nodes.get(n)
                recs = [rec for k, rec in nr.all_records() if k == kind] if nr else []
                if recs:
                    ok = (ok is not False) and all(rec.status != "fail" for rec in recs)
            passed = bool(ok)  # no record from any member: it did not pass
            done.append({"nodes": list(nodes), "passed": passed, "kind": kind})
            launches += 1
        history.append(done)
    s.bisect_results = [g for rnd in history for g in rnd]
    state = localise(list(s.run_info.get("nodes", [])), history)
    s.suspects = state.suspects
    s.bisect_reason = f"{state.reason}, {launches} launch{'es' if launches != 1 else ''}"
