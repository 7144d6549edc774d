"""What changed since the previous run of the same inventory (summary.json ``changes``).

*The same inventory*: run.json's ``inventory``, the inventory sources ansible-playbook read
(roles/verify writes ``ansible_inventory_sources``: absolute paths), is the same list. Nodes
added to or left out of that inventory (``--limit``) keep it the same inventory: that is what
"nodes added / gone" shows.

*The previous run*: among the run folders beside this one (``reports/<id>/``), the run of the
same inventory whose run.json ``finished`` (the UTC time of verify's report step) is the
latest before this run's, and that has a summary.json. A run.json without ``inventory``
(written before gpufleet recorded it) is never compared, on either side: the reason says so.

Compared, between this run's summary.json data and the previous run's summary.json as it was
written (:func:`diff`):

* new failures: records (node, kind, name, GPU) that fail or did not finish now and did
  neither before (absent or passing);
* recoveries: records that failed or did not finish before, on a node of both runs, and now
  pass, warn, skip or are gone;
* nodes added and gone (the node lists of the two runs);
* figures that moved by more than :data:`MOVED` (10 %): the busbw at the largest size of each
  bandwidth series (the cluster all-reduce, each node's own; the same source, node, world
  size, backend and size in both runs), each pair's busbw of the pair sweep, the training's
  total samples/s, its scaling efficiency and each node's samples/s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet.report.model import PASSING
from gpufleet.results import parse_stamp
from gpufleet.units import human_size

#: a figure "moved" when it changed by more than this fraction of its previous value
MOVED = 0.10
#: bandwidth sources compared as figures (pair launches by their pairs, bisection not at all)
SOURCES = {"allreduce": "cluster all-reduce", "smoke": "single-node all-reduce"}

Key = tuple[str, str, str, str]  # node, kind, name, GPU ("" for a node record)


def when(info: Mapping[str, Any]) -> datetime | None:
    """run.json's ``finished`` as a time, or None (absent or unreadable)."""
    text = info.get("finished")
    try:
        return parse_stamp(str(text)) if text else None
    except ValueError:
        return None


def _inventory(info: Mapping[str, Any]) -> list[str] | None:
    inv = info.get("inventory")
    return sorted(str(s) for s in inv) if isinstance(inv, list) and inv else None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def find_previous(run_dir: Path, info: Mapping[str, Any]) -> tuple[Path | None, str]:
    """The previous run of this run's inventory (see the module text), or None and why."""
    inventory = _inventory(info)
    if inventory is None:
        return None, (
            "this run's run.json names no inventory (written before gpufleet recorded it): "
            "no earlier run to compare with"
        )
    mine = when(info)
    here = run_dir.resolve()
    best: tuple[datetime, Path] | None = None
    unnamed = 0
    for d in sorted(run_dir.parent.iterdir()):
        if d.name.startswith(".") or d.is_symlink() or not d.is_dir() or d.resolve() == here:
            continue
        other = _read_json(d / "run.json")
        if not isinstance(other, dict):
            continue
        if _inventory(other) is None:
            unnamed += 1
            continue
        at = when(other)
        if _inventory(other) != inventory or at is None or (mine is not None and at >= mine):
            continue
        if (d / "summary.json").is_file() and (best is None or at > best[0]):
            best = (at, d)
    if best is not None:
        return best[1], ""
    why = f"no earlier run of this inventory ({', '.join(inventory)}) in {run_dir.parent}"
    if unnamed:
        why += (
            f"; {unnamed} run(s) there name no inventory in their run.json (written before "
            "gpufleet recorded it) and are not compared"
        )
    return None, why


def _records(data: Mapping[str, Any]) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for node, n in (data.get("nodes") or {}).items():
        for r in n.get("records") or []:
            key = (str(node), str(r.get("kind")), str(r.get("name")), str(r.get("gpu") or ""))
            out[key] = r
    return out


def _bad(status: Any) -> bool:
    return status not in PASSING


def figures(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of one summary.json that :func:`diff` compares, by a label that names
    them: ``{label: {figure, node, unit, value}}``."""
    out: dict[str, dict[str, Any]] = {}

    def put(label: str, node: str | None, unit: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[label] = {"figure": label, "node": node, "unit": unit, "value": float(value)}

    largest: dict[tuple[str, str, int, str], dict[str, Any]] = {}
    for row in data.get("bandwidth") or []:
        if row.get("source") not in SOURCES:
            continue
        series = (str(row["source"]), str(row["node"]), int(row["world_size"]), str(row["backend"]))
        if series not in largest or row["size_bytes"] > largest[series]["size_bytes"]:
            largest[series] = row
    for (source, node, world, backend), row in sorted(largest.items()):
        where = "" if source == "allreduce" else f" of {node}"
        label = (
            f"busbw, {SOURCES[source]}{where} ({world} ranks, {backend}) at "
            f"{human_size(int(row['size_bytes']))}"
        )
        put(label, None if source == "allreduce" else node, "GB/s", row.get("busbw"))
    for row in (data.get("pairs") or {}).get("rows") or []:
        a, b = sorted((str(row["a"]), str(row["b"])))
        put(f"pair busbw {a} + {b}", None, "GB/s", row.get("busbw"))
    training = data.get("training") or {}
    put("training samples/s, all ranks", None, "samples/s", training.get("total_samples_per_s"))
    put("training scaling efficiency", None, "", training.get("efficiency"))
    per_host: dict[str, float] = {}
    for r in training.get("ranks") or []:
        if isinstance(r.get("samples_per_s"), int | float):
            per_host[str(r.get("host"))] = (
                per_host.get(str(r.get("host")), 0.0) + r["samples_per_s"]
            )
    for host, rate in sorted(per_host.items()):
        put(f"training samples/s of {host}", host, "samples/s", rate)
    return out


def _entry(key: Key, **more: Any) -> dict[str, Any]:
    node, kind, name, gpu = key
    return {"node": node, "kind": kind, "name": name, "gpu": gpu or None, **more}


def diff(data: Mapping[str, Any], prev: Mapping[str, Any]) -> dict[str, Any]:
    """New failures, recoveries, nodes added and gone, figures moved (see the module text)."""
    now, before = _records(data), _records(prev)
    nodes_now, nodes_before = set(data.get("nodes") or {}), set(prev.get("nodes") or {})
    gone = {"status": "gone"}  # a record this run does not have
    new_failures = [
        _entry(
            k,
            status=r.get("status"),
            was=before.get(k, {}).get("status"),
            message=str(r.get("message") or "")[:300],
        )
        for k, r in sorted(now.items())
        if _bad(r.get("status")) and not _bad(before.get(k, {}).get("status", "pass"))
    ]
    recoveries = [
        _entry(k, was=r.get("status"), status=now.get(k, gone).get("status"))
        for k, r in sorted(before.items())
        if _bad(r.get("status"))
        and k[0] in nodes_now
        and not _bad(now.get(k, {}).get("status", "pass"))
    ]
    still = sum(
        1
        for k, r in now.items()
        if _bad(r.get("status")) and _bad(before.get(k, {}).get("status", "pass"))
    )
    f_now, f_before = figures(data), figures(prev)
    moved = []
    for label in sorted(f_now.keys() & f_before.keys()):
        a, b = f_before[label]["value"], f_now[label]["value"]
        change = (b - a) / a if a else None
        if change is not None and abs(change) > MOVED:
            moved.append({**f_now[label], "before": a, "after": b, "change": round(change, 4)})
    moved.sort(key=lambda m: -abs(m["change"]))
    return {
        "new_failures": new_failures,
        "recoveries": recoveries,
        "still_failing": still,
        "nodes_added": sorted(nodes_now - nodes_before),
        "nodes_gone": sorted(nodes_before - nodes_now),
        "moved": moved,
        "moved_threshold": MOVED,
        "nodes_compared": len(nodes_now & nodes_before),
        "figures_compared": len(f_now.keys() & f_before.keys()),
    }


EMPTY: dict[str, Any] = {
    "new_failures": [],
    "recoveries": [],
    "still_failing": 0,
    "nodes_added": [],
    "nodes_gone": [],
    "moved": [],
    "moved_threshold": MOVED,
    "figures_compared": 0,
}


def since_previous(run_dir: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    """summary.json ``changes`` of the run in ``run_dir`` whose summary data is ``data``:
    ``previous`` ({run_id, dir, finished, status, exit_code, age_s}, or None), ``reason`` (why
    nothing was compared, or what was), then :func:`diff`'s keys."""
    info = data.get("run") or {}
    prev_dir, why = find_previous(run_dir, info)
    if prev_dir is None:
        return {"previous": None, "reason": why, **EMPTY}
    prev = _read_json(prev_dir / "summary.json")
    if not isinstance(prev, dict) or not isinstance(prev.get("nodes"), dict):
        why = f"the previous run {prev_dir.name}: its summary.json is not a report (unreadable)"
        return {"previous": None, "reason": why, **EMPTY}
    prev_info = _read_json(prev_dir / "run.json") or {}
    then = when(prev_info)
    mine = when(info) or datetime.now(timezone.utc)
    previous = {
        "run_id": str(prev.get("run_id") or prev_dir.name),
        "dir": prev_dir.name,
        "finished": prev_info.get("finished"),
        "status": prev.get("status"),
        "exit_code": prev.get("exit_code"),
        "age_s": None if then is None else round((mine - then).total_seconds()),
    }
    out = diff(data, prev)
    reason = (
        f"compared with {previous['run_id']}, the previous run of the same inventory: the "
        f"records of {out['nodes_compared']} node(s) in both runs, {out['figures_compared']} "
        "figure(s) measured in both"
    )
    return {"previous": previous, "reason": reason, **out}
