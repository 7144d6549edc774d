"""The acceptance sections of summary.json (issue 40): compute per device, every collective,
the burn-in's samples, ib_write_bw per NIC, and the tier with its budget.

Nothing is judged a second time here: the verdicts are the records the node commands and the
workers wrote (gpufleet.node.compute_run, gpufleet.node.burnin, gpufleet.node.perftest,
gpufleet.verify.collective_ops) and the report's own judges (slow nodes, SDC, profile floors);
these sections lay their figures out for summary.md and index.html:

* ``compute``: per node, per device, its matmul figure, its ratio to the node's best and the
  verdict of its record; the node's figure, the floor's verdict, the fleet median;
* ``collectives``: per collective its verdict, busbw at the largest size (nccl-tests'
  factor), or the backend's reason for skipping it;
* ``burnin``: per node the duration, intervals and NVML samples, and per device the
  clocks, temperature, power, throttle reasons and the matmul figure's first and last third;
* ``ib``: per NIC its node, peer, Gb/s, whether from GPU memory, and the verdict;
* ``tier``: the tier of the run (run.json ``tier``), its budget and the run's wall time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from gpufleet.node.compute import FLOOR, SPREAD, NodeCompute
from gpufleet.report.model import Summary
from gpufleet.results import Record, ResultFile, parse_stamp
from gpufleet.verify import bandwidth as bench

TIER_KIND = "tier"


def _files(s: Summary, kind: str) -> list[tuple[str, ResultFile]]:
    return [(n, f) for n, nr in sorted(s.nodes.items()) for f in nr.files if f.kind == kind]


def _status(records: Iterable[Record], name: str, gpu: str | None) -> str | None:
    for r in records:
        if r.name == name and r.gpu == gpu:
            return str(r.status)
    return None


def compute_section(s: Summary) -> dict[str, Any]:
    nodes = []
    for node, f in _files(s, "compute"):
        nc = NodeCompute.from_meta(node, f.meta)
        best: dict[str, float] = {}
        for fig in nc.figures:
            if not fig.error:
                best[fig.dtype] = max(best.get(fig.dtype, 0.0), fig.tflops)
        devices = [
            {
                "device": fig.device,
                "name": fig.name,
                "dtype": fig.dtype,
                "tflops": fig.tflops,
                "ratio": round(fig.tflops / best[fig.dtype], 3) if best.get(fig.dtype) else None,
                "status": _status(f.records, SPREAD, None if fig.device == "cpu" else fig.device),
                "error": fig.error,
            }
            for fig in nc.figures
        ]
        floor = next((r for r in f.records if r.name == FLOOR), None)
        nodes.append(
            {
                "node": node,
                "model": nc.sdc_key.model if nc.sdc_key else "",
                "mode": f.mode,
                "profile": f.meta.get("profile"),
                "tflops": nc.node_tflops(),
                "spread_fraction": f.meta.get("spread_fraction"),
                "devices": devices,
                "floor": None
                if floor is None
                else {"status": floor.status, "threshold": floor.threshold, "text": floor.message},
            }
        )
    by_model: dict[str, list[float]] = {}
    for n in nodes:
        if isinstance(n["tflops"], int | float):
            by_model.setdefault(str(n["model"]), []).append(float(n["tflops"]))
    medians = {m: round(statistics.median(v), 4) for m, v in sorted(by_model.items())}
    return {
        "nodes": nodes,
        # the nodes of one device model are compared with each other (gpufleet.report.slownodes)
        "fleet_medians": medians,
        "fleet_median": next(iter(medians.values())) if len(medians) == 1 else None,
        "reason": f"{len(nodes)} node(s) measured"
        if nodes
        else "no compute result in this run (the compute step did not run)",
    }


def collectives_section(s: Summary) -> dict[str, Any]:
    ops = []
    for node, f in _files(s, "collectives"):
        rows = f.bandwidth
        for r in f.records:
            if not r.name.startswith("collective_"):
                continue
            op = r.name.removeprefix("collective_")
            mine = [b for b in rows if b.op == op]
            last = max(mine, key=lambda b: b.size_bytes) if mine else None
            world = int(f.meta.get("world_size") or (last.world_size if last else 0) or 0)
            ops.append(
                {
                    "op": op,
                    "node": node,
                    "status": r.status,
                    "message": r.message,
                    "busbw": last.busbw if last else None,
                    "size_bytes": last.size_bytes if last else None,
                    "world_size": world or None,
                    "backend": f.meta.get("backend"),
                    "factor": round(bench.busbw_factor(world, op), 6) if world else None,
                    "skipped": (f.meta.get("skipped") or {}).get(op, ""),
                }
            )
    return {
        "ops": ops,
        "reason": f"{len(ops)} collective(s) beside all-reduce"
        if ops
        else "no collectives result in this run (tier quick, verify_collectives false, or the "
        "cluster all-reduce did not pass on every node)",
    }


def burnin_section(s: Summary) -> dict[str, Any]:
    nodes = []
    for node, f in _files(s, "burnin"):
        nodes.append(
            {
                "node": node,
                "duration_s": f.meta.get("duration_s"),
                "interval_s": f.meta.get("interval_s"),
                "samples": len(f.meta.get("samples") or []),
                "devices": f.meta.get("summary") or [],
                "failed": sorted({r.name for r in f.records if r.status == "fail"}),
            }
        )
    return {"nodes": nodes}


def ib_section(s: Summary) -> dict[str, Any]:
    ports = []
    for n, nr in sorted(s.nodes.items()):
        for f in nr.files:
            if not f.kind.startswith("ibbw"):
                continue
            for r in f.records:
                ports.append(
                    {
                        "node": n,
                        "peer": f.meta.get("peer"),
                        "nic": r.name.split(":", 1)[-1],
                        "gbps": r.value,
                        "floor": r.threshold,
                        "status": r.status,
                        "message": r.message,
                    }
                )
    return {"ports": ports}


def tier_section(s: Summary) -> dict[str, Any] | None:
    """The run's tier (run.json ``tier``: name, budget_s, duration_s) and its wall time from
    run.json ``started`` to ``finished``; None for a run without a tier."""
    tier = s.run_info.get("tier")
    if not isinstance(tier, dict) or not tier.get("name"):
        return None
    elapsed = None
    try:
        start, end = s.run_info.get("started"), s.run_info.get("finished")
        if start and end:
            elapsed = round((parse_stamp(str(end)) - parse_stamp(str(start))).total_seconds(), 1)
    except ValueError:
        elapsed = None
    budget = tier.get("budget_s")
    within = None if elapsed is None or not budget else elapsed <= float(budget)
    return {**tier, "elapsed_s": elapsed, "within": within}


def tier_record(s: Summary, section: dict[str, Any] | None) -> Record | None:
    """A warning on the first node when the run took longer than its tier's budget."""
    if not section or section.get("within") is not False or not s.nodes:
        return None
    node = str(s.run_info.get("master") or "").split(" ")[0]
    node = node if node in s.nodes else sorted(s.nodes)[0]
    return Record(
        f"{TIER_KIND}:budget",
        "warn",
        node=node,
        value=section["elapsed_s"],
        threshold=section["budget_s"],
        message=f"tier {section['name']} took {section['elapsed_s']} s, over its budget of "
        f"{section['budget_s']} s",
        remedy="see which step took the time (the ansible output's task times, "
        "docs/performance.md); on a Slurm prolog use TIER=quick with verify_dcgm off",
    )
