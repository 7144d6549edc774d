"""Report sections for the cluster training step and for where each feature actually ran.

``training_record`` reads the ``train`` ResultFile (gpufleet.verify.workers.train, written by the
global rank 0) and ``training_lines`` renders it for the terminal beside the all-reduce
table; ``features`` lists, per feature, the nodes, device type and world size it ran on
and the records that skipped it with their reason.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from gpufleet.results import ResultFile

# record-name prefix (smoke suite test names, worker records) -> feature
FEATURES: tuple[tuple[str, str], ...] = (
    ("test_dataparallel", "DataParallel"),
    ("test_ddp", "DDP (one node)"),
    ("test_syncbn", "SyncBatchNorm (one node)"),
    ("test_amp", "AMP (one node)"),
    ("test_allreduce", "all-reduce (one node)"),
    ("nccl", "NCCL"),
    ("allreduce", "all-reduce (cluster)"),
    ("train_syncbn", "SyncBatchNorm (cluster training)"),
    ("train_amp", "AMP (cluster training)"),
    ("train", "DDP training (cluster)"),
)


@functools.lru_cache(maxsize=4096)  # called once per record; few distinct (kind, name)
def feature_of(kind: str, name: str) -> str | None:
    if kind.startswith("bisect-") or kind == "train-1node":
        return None
    key = name if kind in ("smoke", "checks", "train") else kind
    for prefix, feature in FEATURES:
        if key.startswith(prefix):
            return feature
    return None


def _world(kind: str, rf: ResultFile) -> int | None:
    w = rf.meta.get("world_size") if kind != "smoke" else rf.meta.get("nproc")
    return int(w) if isinstance(w, int | float | str) and str(w).isdigit() else None


def features(files: Iterable[tuple[str, ResultFile]]) -> list[dict[str, Any]]:
    """[{feature, ran: [{node, mode, world_size}], skipped: [{node, reason}], failed: n}]."""
    table: dict[str, dict[str, Any]] = {}
    seen: set[tuple[str, str, tuple[Any, ...]]] = set()  # (feature, list, entry): no rescans

    def add(feature: str, key: str, entry: dict[str, Any]) -> None:
        mark = (feature, key, tuple(entry.values()))
        if mark not in seen:
            seen.add(mark)
            table[feature][key].append(entry)

    for node, rf in files:
        for r in rf.records:
            feature = feature_of(rf.kind, r.name)
            if feature is None:
                continue
            row = table.setdefault(
                feature, {"feature": feature, "ran": [], "skipped": [], "failed": 0}
            )
            if r.status == "skip":
                add(feature, "skipped", {"node": node, "reason": r.message})
                continue
            if r.status == "fail":
                row["failed"] += 1
            where = {"node": node, "mode": rf.mode, "world_size": _world(rf.kind, rf)}
            if rf.kind == "train":
                where["node"] = f"{rf.meta.get('nnodes')} nodes"
            add(feature, "ran", where)
    order = {f: i for i, (_, f) in enumerate(FEATURES)}
    return sorted(table.values(), key=lambda r: order.get(r["feature"], 99))


def training_record(files: Iterable[tuple[str, ResultFile]]) -> dict[str, Any] | None:
    """The cluster training result as the report shows it (None when it did not run)."""
    for node, rf in files:
        if rf.kind != "train":
            continue
        m = rf.meta
        statuses = {r.name: r.status for r in rf.records}
        return {
            "node": node,
            "nnodes": m.get("nnodes"),
            "world_size": m.get("world_size"),
            "backend": m.get("backend"),
            "device_type": m.get("device_type"),
            "amp": m.get("amp"),
            "syncbn": m.get("syncbn"),
            "epochs": m.get("epochs"),
            "epoch_loss": m.get("epoch_loss", []),
            "params_max_diff": m.get("params_max_diff"),
            "statuses": statuses,
            "ranks": [
                {k: r.get(k) for k in ("rank", "host", "device", "samples_per_s")}
                for r in m.get("ranks", [])
            ],
            "total_samples_per_s": m.get("total_samples_per_s"),
            "baseline_total_samples_per_s": m.get("baseline_total_samples_per_s"),
            "efficiency": m.get("efficiency"),
            "efficiency_formula": m.get("efficiency_formula"),
        }
    return None


def training_lines(t: dict[str, Any] | None) -> list[str]:
    """Terminal lines for the training record (empty when it did not run)."""
    if not t:
        return []
    loss = " -> ".join(f"{v:.4f}" for v in t["epoch_loss"])
    eff = t.get("efficiency")
    lines = [
        "",
        f"cluster training: {t['nnodes']} nodes, world size {t['world_size']}, {t['backend']} "
        f"({t['device_type']}), AMP {t['amp']}, SyncBatchNorm {'yes' if t['syncbn'] else 'no'}",
        f"  loss per epoch {loss}; params max |diff| {t['params_max_diff']}; "
        + ", ".join(f"{k} {v}" for k, v in sorted(t["statuses"].items())),
        f"  {'rank':>4} {'host':<16} {'device':<8} {'samples/s':>10}",
    ]
    for r in t["ranks"]:
        lines.append(
            f"  {r['rank']:>4} {r['host']!s:<16} {r['device']!s:<8} "
            f"{float(r['samples_per_s']):>10.1f}"
        )
    total = float(t["total_samples_per_s"] or 0)
    base = t.get("baseline_total_samples_per_s")
    lines.append(
        f"  total {total:.1f} samples/s; one node {float(base):.1f} samples/s; "
        f"scaling efficiency {float(eff):.2f} ({t['efficiency_formula']})"
        if eff is not None and base
        else f"  total {total:.1f} samples/s; no one-node baseline (one node): no efficiency"
    )
    return lines
