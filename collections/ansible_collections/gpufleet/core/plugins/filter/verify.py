"""verify filters: the bisection reruns that name the node at fault, the pair sweep's
rounds, the Slurm launcher's jobs and task scripts, and the tier's steps and budget.

Thin adapters over :mod:`gpufleet.report.localise`, :mod:`gpufleet.report.pairs`,
:mod:`gpufleet.verify.tiers` and :mod:`gpufleet.verify.launchers.slurm`
(imported from
the controller venv that ``make setup`` builds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.errors import GpufleetError
    from gpufleet.report import localise, pairs
    from gpufleet.units import parse_duration
    from gpufleet.verify import tiers
    from gpufleet.verify.launchers import slurm


def _names(nodes: Sequence[str], what: str) -> list[str]:
    if isinstance(nodes, (str, bytes)) or not all(isinstance(n, str) for n in nodes):
        raise TypeError(f"{what} needs a list of node names, got {nodes!r}")
    return list(nodes)


def bisect_groups(
    nodes: Sequence[str], history: Sequence[Sequence[Mapping[str, Any]]] = ()
) -> list[list[str]]:
    """``nodes | gpufleet.core.bisect_groups(history)`` -> the groups of the next round
    ([] when done); ``history``: the rounds so far, ``[[{nodes, passed}, ...], ...]``."""
    return localise.next_groups(_names(nodes, "bisect_groups"), list(history or []))


def bisect_outcome(
    groups: Sequence[Sequence[str]], launch_rc: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``groups | gpufleet.core.bisect_outcome({node: torchrun rc})`` -> the round as run:
    ``[{nodes, passed}]``, a group passed when every member's launch exited 0."""
    return [
        {"nodes": list(g), "passed": all(str(launch_rc.get(n, -1)).strip() == "0" for n in g)}
        for g in groups
    ]


def bisect_max_rounds(nodes: Sequence[str]) -> int:
    """``nodes | gpufleet.core.bisect_max_rounds`` -> the longest bisection of these nodes."""
    return localise.max_rounds(len(_names(nodes, "bisect_max_rounds")))


def pair_rounds(nodes: Sequence[str]) -> list[list[list[str]]]:
    """``nodes | gpufleet.core.pair_rounds`` -> the pair sweep's rounds of disjoint pairs
    (gpufleet.report.pairs: every node in two pairs, at most 3 rounds)."""
    return [[list(p) for p in rnd] for rnd in pairs.pair_rounds(_names(nodes, "pair_rounds"))]


def pair_kinds(rounds: Sequence[Sequence[Sequence[str]]], prefix: str) -> dict[str, list[str]]:
    """``rounds | gpufleet.core.pair_kinds('ibbw')`` -> {``ibbw-<round>-<index>``: [the pair's
    first node]}: the result file each pair leaves and who writes it (gpufleet.report.pairs)."""
    return pairs.pair_kinds([[list(p) for p in rnd] for rnd in rounds], str(prefix))


def slurm_task_script(head: Sequence[str], tail: Sequence[str], **kw: Any) -> str:
    """``head | gpufleet.core.slurm_task_script(tail, node=, step=, addresses=, rc_file=,
    env=)`` -> the task script srun runs on this node
    (gpufleet.verify.launchers.slurm.task_script)."""
    return slurm.task_script(
        node=str(kw["node"]),
        step=str(kw["step"]),
        head=[str(a) for a in head],
        tail=[str(a) for a in tail],
        addresses={str(k): str(v) for k, v in dict(kw["addresses"]).items()},
        rc_file=str(kw["rc_file"]),
        env={str(k): str(v) for k, v in dict(kw.get("env") or {}).items()},
    )


def slurm_jobs(parts: Sequence[Mapping[str, Any]], step: str) -> list[dict[str, Any]]:
    """``parts | gpufleet.core.slurm_jobs(step)`` -> [{launch, hosts, names}], one per job."""
    return slurm.jobs_from_parts(list(parts), str(step))


def slurm_hosts_in_order(slurm_names: Mapping[str, str], order: Sequence[str]) -> list[str]:
    """``{host: slurm name} | gpufleet.core.slurm_hosts_in_order(order)`` -> the inventory
    hosts in Slurm's order."""
    return slurm.hosts_in_order(dict(slurm_names), list(order))


def verify_tier(name: str, duration: Any = "") -> dict[str, Any]:
    """``verify_tier | gpufleet.core.verify_tier(verify_burnin_duration)`` -> the tier's
    steps and budget (gpufleet.verify.tiers), with ``duration_s`` (0 unless burnin)."""
    text = str(duration or "").strip()
    seconds = parse_duration(text, "verify_burnin_duration") if text else 0
    seconds = seconds if name == "burnin" else 0
    return {**tiers.tier(str(name), seconds).to_dict(), "duration_s": seconds}


class FilterModule:
    """gpufleet.core verify filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return as_filters(
            (
                bisect_groups,
                bisect_outcome,
                bisect_max_rounds,
                pair_rounds,
                pair_kinds,
                slurm_task_script,
                slurm_jobs,
                slurm_hosts_in_order,
                verify_tier,
            ),
            (TypeError, KeyError, ValueError, GpufleetError),
        )
