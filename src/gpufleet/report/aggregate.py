"""Aggregation: reports/<run-id> into a Summary, and the Summary as summary.json."""

from __future__ import annotations

import datetime
import json
import os
import re
from pathlib import Path
from typing import Any

from gpufleet.errors import GpufleetError, RefusedError
from gpufleet.report import (
    acceptance,
    changes,
    junit,
    profile_floors,
    reproduce,
    sdc,
    slownodes,
    training,
)
from gpufleet.report.localise import analyse_bisection
from gpufleet.report.logs import (
    junit_records,
    launch_root_cause,
    log_tail,
    remedy_for,
)
from gpufleet.report.logscan import first_error_note, launch_first_error
from gpufleet.report.model import NodeResult, Summary
from gpufleet.results import SCHEMA, Record, load_result_file
from gpufleet.verify.bandwidth import busbw_factor

# run.json keys and the JSON type collect() relies on
_RUN_INFO_TYPES: dict[str, type] = {
    "nodes": list, "expect": dict, "dropped": dict, "bisect": list, "inventory": list,
}  # fmt: skip


def read_run_info(path: Path) -> dict[str, Any]:
    """run.json as a dict; a broken file is a GpufleetError (exit 1) naming the file."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise GpufleetError(f"{path}: not valid JSON ({exc}); rerun make verify") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise GpufleetError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(info, dict):
        raise GpufleetError(f"{path}: expected a JSON object, got {type(info).__name__}")
    for key, typ in _RUN_INFO_TYPES.items():
        if key in info and not isinstance(info[key], typ):
            raise GpufleetError(
                f"{path}: {key!r} must be a JSON {'array' if typ is list else 'object'}"
            )
    return info


def collect(run_dir: str | os.PathLike[str]) -> Summary:
    run = Path(run_dir)
    if not run.is_dir():
        raise RefusedError(f"{run} is not a directory (expected reports/<run-id>)")
    info = read_run_info(run / "run.json") if (run / "run.json").is_file() else {}
    node_names = set(info.get("nodes", []))
    node_names |= {p.name for p in run.iterdir() if p.is_dir() and not p.name.startswith(".")}
    nodes: dict[str, NodeResult] = {}
    for name in sorted(node_names):
        nr = NodeResult(name)
        d = run / name
        seen: set[str] = set()
        for f in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                rf = load_result_file(f)
            except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
                nr.records.append(
                    Record(
                        name=f"{f.stem}:result",
                        status="fail",
                        node=name,
                        message=f"unreadable result file {f.name}: {exc}",
                        remedy="rerun make verify; report the file if it persists",
                    )
                )
                continue
            if info.get("result_run_ids") and rf.run_id != info.get("run_id"):
                # a file another run wrote (or one without a run id) never counts
                nr.records.append(
                    Record(
                        name=f"{f.stem}:result",
                        status="fail",
                        node=name,
                        value=rf.run_id,
                        message=f"{f.name} was written by run {rf.run_id or '(none)'}, not by "
                        f"this run {info.get('run_id')}: a stale file cannot count",
                        remedy="rerun make verify (each run gets a fresh run id and run "
                        "directory); never reuse a RUN_ID",
                    )
                )
                seen.add(f.stem)  # neither its XML twin nor a "missing" record either
                continue
            nr.files.append(rf)
            seen.add(f.stem)
        for x in sorted(d.glob("*.xml")) if d.is_dir() else []:
            if x.stem not in seen:
                nr.records.extend(junit_records(x, name))
                seen.add(x.stem)
        dropped = info.get("dropped", {}).get(name)
        for kind, expected_nodes in info.get("expect", {}).items():
            if dropped is None and name in expected_nodes and kind not in seen:
                tail = log_tail(d / f"{kind}.log")
                # a rank's own error line, if any: the launch log, else the ranks' stderr
                found = launch_first_error(d / f"{kind}.log")
                nr.records.append(
                    Record(
                        name=f"{kind}:result",
                        status="fail",
                        node=name,
                        message=f"no {kind}.json from {name}"
                        + (
                            f"; first error ({found[0]} line {found[1].line}): "
                            f"{found[1].text[:300]}"
                            if found
                            else ""
                        )
                        + (
                            f"; last lines of {kind}.log:\n{tail}"
                            if tail
                            else " and no log (the task did not start or the fetch failed)"
                        ),
                        remedy=remedy_for(tail)
                        if tail
                        else (
                            f"see the ansible output for {name}: the {kind} step failed or was "
                            "skipped before writing its result"
                        ),
                    )
                )
        if dropped is not None:
            nr.records.append(
                Record(
                    name="ansible:node",
                    status="fail",
                    node=name,
                    message=f"{name} dropped out of the run: {str(dropped).strip()[-600:]}",
                    remedy=(
                        f"fix {name} (make provision, or check SSH/reachability) "
                        "and rerun make verify"
                    ),
                )
            )
        cause = launch_root_cause(d / "allreduce.log")
        if cause.get("signal"):
            nr.records.append(
                Record(
                    name="allreduce:signal",
                    status="fail",
                    node=name,
                    value=cause["signal"],
                    message=(
                        f"rank {cause['rank']} (local rank {cause['local_rank']}) on {name} was "
                        f"killed by {cause['signal']} at {cause['time']}; the other nodes' "
                        "ranks failed because this peer went away"
                        + first_error_note(cause, "allreduce.log")
                    ),
                    remedy=(
                        f"{cause['signal']} from outside the run: the kernel OOM killer "
                        f"(journalctl -k / dmesg on {name}), a job scheduler or an operator; "
                        "free memory or lower verify_sizes, then rerun make verify"
                    ),
                )
            )
        nodes[name] = nr
    summary = Summary(
        run_id=str(info.get("run_id", run.name)), run_dir=run, run_info=info, nodes=nodes
    )
    analyse_bisection(summary)
    for rec in slownodes.find(summary):
        nodes[rec.node].records.append(rec)
    for rec in profile_floors.judge(summary):
        nodes[rec.node].records.append(rec)
    for rec in sdc.judge(summary):
        nodes[rec.node].records.append(rec)
    budget = acceptance.tier_record(summary, acceptance.tier_section(summary))
    if budget is not None:
        nodes[budget.node].records.append(budget)
    unavailable = slurm_unavailable(summary)
    if summary.suspects:
        summary.suspect_reason = summary.bisect_reason
    elif unavailable:  # a Slurm job waited for nodes Slurm would not give it
        summary.suspects = unavailable
        summary.suspect_reason = "Slurm did not make them available (the job never started)"
    else:  # no bisection verdict: the nodes where a signal killed a rank, else dropped nodes
        killed = sorted(
            n for n, nr in nodes.items() if any(r.name == "allreduce:signal" for r in nr.records)
        )
        dropped = sorted(info.get("dropped", {}))
        summary.suspects = killed or dropped
        summary.suspect_reason = (
            "killed by a signal" if killed else "dropped out of the run" if dropped else ""
        )
    return summary


def slurm_unavailable(s: Summary) -> list[str]:
    """Inventory nodes that a Slurm job waited for in vain: Slurm's pending reason names them
    (``ReqNodeNotAvail, UnavailableNodes:node3``); mapped back through run.json's
    ``slurm_names`` ({inventory host: Slurm name})."""
    names = s.run_info.get("slurm_names") or {}
    by_slurm = {str(v): str(k) for k, v in names.items()} if isinstance(names, dict) else {}
    out: set[str] = set()
    for nr in s.nodes.values():
        for f in nr.files:
            if not f.kind.startswith("slurm-") or f.meta.get("started_after_s") is not None:
                continue
            m = re.search(r"UnavailableNodes:(\S*)", str(f.meta.get("reason") or ""))
            for name in expand_hostlist(m.group(1)) if m else []:
                out.add(by_slurm.get(name, name))
    return sorted(out)


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist (``node[1-3,5],gpu7``) as names; enough of the syntax for reasons."""
    out: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?", text.strip().strip(",")):
        prefix, ranges = m.group(1).lstrip(","), m.group(2)
        if not ranges:
            out.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if lo.isdigit() and (not hi or hi.isdigit()):
                width = len(lo)
                for i in range(int(lo), int(hi or lo) + 1):
                    out.append(f"{prefix}{i:0{width}d}")
    return [n for n in out if n]


def record_dict(r: Record) -> dict[str, Any]:
    """``r.to_dict()`` without dataclasses.asdict's deep copy (the report only reads it):
    asdict was a third of the report's time at 1000 nodes (tests/bench/bench_report.py)."""
    return dict(vars(r))


#: what summary.json keeps of a node's system profile (the checks file's meta["profile"],
#: written by the node check profile: gpufleet.node.health.system_profile.profile_meta)
PROFILE_KEYS = ("name", "requested", "how", "ib_compared", "error", "findings")


def node_profile(nr: NodeResult) -> dict[str, Any] | None:
    """The node's system profile and its findings (each with expected and found), from the
    node checks' result file; None when the checks did not judge one."""
    meta = profile_floors.profile_meta(nr.files)
    if meta is None:
        return None
    findings = meta.get("findings")
    return {
        **{k: meta.get(k) for k in PROFILE_KEYS},
        "findings": findings if isinstance(findings, list) else [],
    }


def threshold_source(s: Summary, node: str, kind: str, r: Record, meta: dict[str, Any]) -> str:
    """Where a record's threshold came from, as far as the run says: the result file's
    ``threshold_source`` (the all-reduce gates), or the profile and source of a profile floor;
    "" when nothing in the run says it (the message may)."""
    if kind == profile_floors.KIND:
        floor = r.name.split(":", 1)[-1]
        for f in s.floors.get(node, []):
            if f.get("floor") == floor and f.get("profile"):
                src = f.get("source")
                return f"profile {f['profile']}" + (f": {src}" if src else "")
        return ""
    if r.threshold is not None and r.threshold == meta.get("threshold"):
        return str(meta.get("threshold_source") or "")
    return ""


def record_out(
    s: Summary,
    node: str,
    kind: str,
    r: Record,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A record as summary.json holds it: ``kind`` and the record's fields; one that did not
    pass (warn, fail, incomplete) also ``reproduce`` (gpufleet.report.reproduce: the command,
    where to run it) and ``threshold_source``. ``meta``: the result file's meta (None for a
    record the report made)."""
    out = {"kind": kind, **record_dict(r)}
    if r.status not in ("pass", "skip"):
        rerun = (meta or {}).get("rerun")
        how = reproduce.reproducer(
            node, kind, r, rerun if isinstance(rerun, dict) else None, s.run_info
        )
        out["reproduce"] = how.to_dict()
        out["threshold_source"] = threshold_source(s, node, kind, r, meta or {})
    return out


def node_records(s: Summary, node: str, nr: NodeResult) -> list[dict[str, Any]]:
    """The node's records in ``NodeResult.all_records`` order, as :func:`record_out` gives them."""
    out = [record_out(s, node, f.kind, r, f.meta) for f in nr.files for r in f.records]
    n_files = sum(len(f.records) for f in nr.files)
    return out + [record_out(s, node, k, r) for k, r in nr.all_records()[n_files:]]


def bandwidth_gates(s: Summary) -> list[dict[str, Any]]:
    """The threshold each bandwidth sweep was gated on, where its result file recorded one
    (``meta.threshold`` and ``meta.threshold_source``: the all-reduce worker, the smoke suite)."""
    return [
        {
            "source": f.kind,
            "node": n,
            "threshold": f.meta["threshold"],
            "threshold_source": str(f.meta.get("threshold_source") or ""),
        }
        for n, nr in sorted(s.nodes.items())
        for f in nr.files
        if f.bandwidth and isinstance(f.meta.get("threshold"), int | float)
    ]


def to_json(s: Summary) -> dict[str, Any]:
    """summary.json: the data every format of the report is rendered from (summary.md,
    index.html, the terminal table; junit.xml from the same Summary)."""
    records = {n: node_records(s, n, nr) for n, nr in sorted(s.nodes.items())}
    out = {
        "schema": SCHEMA,
        "run_id": s.run_id,
        "generated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "status": s.status,
        "exit_code": s.exit_code,
        "counts": s.counts(),
        "run": s.run_info,
        "nodes": {
            n: {
                "mode": sorted({f.mode for f in nr.files if f.mode in ("gpu", "cpu")}),
                "files": [f.kind for f in nr.files],
                "profile": node_profile(nr),
                "floors": s.floors.get(n, []),
                "records": records[n],
            }
            for n, nr in sorted(s.nodes.items())
        },
        "failures": [
            {"node": n, **r} for n, rs in records.items() for r in rs if r["status"] == "fail"
        ],
        "bandwidth": [{"source": k, "node": n, **b.to_dict()} for k, n, b in s.bandwidth()],
        "bandwidth_gates": bandwidth_gates(s),
        "busbw_factors": {
            str(w): round(busbw_factor(w), 6)
            for w in sorted({b.world_size for *_, b in s.bandwidth()})
        },
        # every collective's factor (nccl-tests) at each world size it ran with
        "busbw_factors_by_op": {
            op: {str(w): round(busbw_factor(w, op), 6) for w in sorted(ws)}
            for op, ws in sorted(_op_worlds(s).items())
        },
        "bisect": s.bisect_results,
        "bisect_reason": s.bisect_reason,
        "suspect_nodes": s.suspects,
        "suspect_reason": s.suspect_reason,
        "launcher": str(s.run_info.get("launcher") or "ssh"),
        "junit": junit.FILE,  # relative to the run folder
        "slow_nodes": s.slow_nodes,
        "slow_reason": s.slow_reason,
        "floors_reason": s.floors_reason,
        "pairs": s.pairs,
        "slurm_jobs": slurm_jobs(s),
        **training_sections(s),
        "tier": acceptance.tier_section(s),
        "compute": acceptance.compute_section(s),
        "collectives": acceptance.collectives_section(s),
        "sdc": s.sdc,
        "burnin": acceptance.burnin_section(s),
        "ib": acceptance.ib_section(s),
    }
    out["changes"] = changes.since_previous(s.run_dir, out)
    return out


def _op_worlds(s: Summary) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for *_, b in s.bandwidth():
        out.setdefault(b.op, set()).add(b.world_size)
    return out


SLURM_JOB_KEYS = (
    "job_id", "job_name", "state", "reason", "exit_code", "signal", "nodes",
    "started_after_s", "ended_after_s", "cancelled", "cancel_reason", "error", "ok",
)  # fmt: skip


def slurm_jobs(s: Summary) -> list[dict[str, Any]]:
    """The Slurm job of every cluster step (``slurm-<step>.json`` from the submit host)."""
    out = []
    for n, nr in sorted(s.nodes.items()):
        for f in nr.files:
            if f.kind.startswith("slurm-"):
                job = {k: f.meta.get(k) for k in SLURM_JOB_KEYS}
                out.append(
                    {
                        "step": f.meta.get("step") or f.kind.removeprefix("slurm-"),
                        "submit_host": n,
                        **job,
                    }
                )
    return sorted(out, key=lambda j: str(j.get("job_id") or ""))


def training_sections(s: Summary) -> dict[str, Any]:
    """The cluster training record and where each feature ran (gpufleet.report.training)."""
    files = [(n, f) for n, nr in sorted(s.nodes.items()) for f in nr.files]
    return {"training": training.training_record(files), "features": training.features(files)}
