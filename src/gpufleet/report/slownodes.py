"""Slow nodes: each node's figures against the fleet median (issue 30 item 4, report side).

A node that works but is slow (a throttled GPU, a PCIe link trained down, a bad NIC) passes
every check and drags every collective it joins. The figures compared, per node:

- ``local_busbw``: the node's own all-reduce busbw (smoke.json rows, all ranks on that
  node) at the largest size every node measured; the median of repeated rows of a size;
- ``train_samples_per_s``: the sum of its ranks' samples/s in the cluster training step
  (train.json ``meta.ranks``, matched by host name);
- ``compute_tflops``: the node's matmul figure (compute.json from ``gpufleet compute``: the
  median over its devices of the bf16 figure on GPUs, float32 on the CPU;
  :meth:`gpufleet.node.compute.NodeCompute.node_tflops`);
- ``pair_busbw``: from verify's pair sweep (two-node all-reduces on the pairs of
  gpufleet.report.pairs, each leaving ``pair-<round>-<index>.json`` on both its nodes), or a
  ``pairs.json`` (kind ``pairs``, ``meta.pairs``: ``[{a, b, size_bytes, busbw}]``): the
  median busbw of the node's pairs, and the node is slow there only when every pair it is
  in is slow (one slow link slows one pair, a slow node all).

A figure is slow below ``ratio x the fleet median``. The compute figure has its own ratios
(FIGURE_RATIO): 0.9 on GPUs (a node whose median GPU is more than 10 % below the fleet's:
gpu-fryer's margin, https://github.com/huggingface/gpu-fryer), 0.2 on CPU nodes (three
testbed nodes measuring at once on two shared cores differ by 2x; a CPU throttled to a
tenth is far below). Every other figure: RATIO["cpu"] = 0.33 for CPU/gloo runs
(on two shared cores healthy nodes' local busbw differed 3x), RATIO["gpu"] = 0.8 for
GPU/NCCL runs, whose figures are stable. No comparison runs with fewer than MIN_NODES nodes
having the figure. The evidence is in two groups, local (``local_busbw``) and cross-node
(``pair_busbw``, ``train_samples_per_s``). Where a node has cross-node figures, they decide:
a throttled link or NIC shows only there, and a pair figure is already two measurements (a
node is slow there only when every pair it is in is slow); a low local figure then adds to
the evidence but names nobody on its own (noise in one measurement names nobody). Without
cross-node figures the local one decides. The compute figure is evidence of its own kind (a
throttled GPU or CPU computes slowly whatever the links do): it names a node by itself. A
named node is a
warning (the run still passes) unless a figure is also under its floor (the threshold the
suite recorded for it), which fails.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.node.compute import NodeCompute
from gpufleet.report.model import Summary
from gpufleet.results import Record, ResultFile

RATIO = {"cpu": 0.33, "gpu": 0.8}
FIGURE_RATIO = {"compute_tflops": {"cpu": 0.2, "gpu": 0.9}}
#: result kind of one pair launch of verify's pair sweep: pair-<round>-<index>
PAIR_KIND_PREFIX = "pair-"
MIN_NODES = 3
LOCAL = ("local_busbw",)
CROSS = ("pair_busbw", "train_samples_per_s")
#: figures that name a node by themselves
SELF = ("compute_tflops",)
UNITS = {"local_busbw": "GB/s", "pair_busbw": "GB/s", "train_samples_per_s": "samples/s",
         "compute_tflops": "TFLOP/s"}  # fmt: skip
REMEDY = (
    "compare this node with a healthy one: nvidia-smi -q -d PERFORMANCE,CLOCK (throttle "
    "reasons), nvidia-smi topo -m and the PCIe link (checks pcie_link), the NIC's rate "
    "(ibstat); rerun make verify after fixing it"
)


@dataclass(frozen=True)
class Figure:
    node: str
    figure: str
    value: float
    floor: float | None = None
    all_pairs_slow: bool | None = None  # pair_busbw only
    #: pair_busbw: the median of the pairs without this node; compute_tflops: the median of
    #: the nodes of the same device model
    reference: float | None = None


def local_busbw(files: Iterable[tuple[str, ResultFile]]) -> list[Figure]:
    """Each node's smoke busbw at the largest size all nodes measured (median of repeats)."""
    per: dict[str, dict[int, list[float]]] = {}
    floors: dict[str, float] = {}
    for node, f in files:
        if f.kind != "smoke" or not f.bandwidth:
            continue
        for row in f.bandwidth:
            per.setdefault(node, {}).setdefault(row.size_bytes, []).append(row.busbw)
        for r in f.records:
            if r.name.startswith("test_allreduce") and isinstance(r.threshold, int | float):
                floors[node] = float(r.threshold)
    if not per:
        return []
    common = set.intersection(*(set(sizes) for sizes in per.values()))
    if not common:
        return []
    size = max(common)
    return [
        Figure(n, "local_busbw", statistics.median(sizes[size]), floors.get(n))
        for n, sizes in sorted(per.items())
    ]


def train_rates(files: Iterable[tuple[str, ResultFile]], nodes: set[str]) -> list[Figure]:
    """Each node's summed samples/s of the cluster training (ranks matched by host)."""
    for _, f in files:
        if f.kind != "train":
            continue
        total: dict[str, float] = {}
        for r in f.meta.get("ranks", []):
            host, rate = str(r.get("host")), r.get("samples_per_s")
            if host in nodes and isinstance(rate, int | float):
                total[host] = total.get(host, 0.0) + float(rate)
        return [Figure(n, "train_samples_per_s", v) for n, v in sorted(total.items())]
    return []


def compute_figures(files: Iterable[tuple[str, ResultFile]]) -> list[Figure]:
    """Each node's matmul figure from its compute result, with the median of the nodes of
    its device model as its reference (an A100 node is never compared with H100 nodes);
    a model with fewer than MIN_NODES nodes is compared with nothing."""
    groups: dict[str, list[tuple[str, float]]] = {}
    for node, f in files:
        if f.kind != "compute":
            continue
        nc = NodeCompute.from_meta(node, f.meta)
        value = nc.node_tflops()
        if value is not None:
            model = nc.sdc_key.model if nc.sdc_key else ""
            dtypes = ",".join(sorted({fig.dtype for fig in nc.primary()}))
            groups.setdefault(f"{model} {dtypes}", []).append((node, value))
    out = []
    for members in groups.values():
        if len(members) < MIN_NODES:
            continue
        ref = statistics.median(v for _, v in members)
        out += [Figure(node, "compute_tflops", v, reference=ref) for node, v in members]
    return out


def launched_pair_rows(files: Iterable[tuple[str, ResultFile]]) -> list[dict[str, Any]]:
    """Pair rows from verify's pair sweep: every pair launch ``pair-<round>-<index>`` leaves
    a result file of that kind on both of its nodes (node rank 0 holds the bandwidth rows);
    the row is {a, b, size_bytes, busbw} at the launch's largest size."""
    by_kind: dict[str, list[tuple[str, ResultFile]]] = {}
    for node, f in files:
        if f.kind.startswith(PAIR_KIND_PREFIX):
            by_kind.setdefault(f.kind, []).append((node, f))
    rows = []
    for kind, members in sorted(by_kind.items()):
        if len(members) != 2:
            continue  # a node of the pair left no result: its failure is reported as such
        (a, fa), (b, fb) = sorted(members, key=lambda m: int(m[1].meta.get("node_rank") or 0))
        bw = fa.bandwidth or fb.bandwidth
        if not bw:
            continue
        last = max(bw, key=lambda r: r.size_bytes)
        rows.append(
            {"a": a, "b": b, "size_bytes": last.size_bytes, "busbw": last.busbw, "kind": kind}
        )
    return rows


def pair_rows(files: Iterable[tuple[str, ResultFile]]) -> list[dict[str, Any]]:
    """The pair-sweep rows {a, b, size_bytes, busbw} at the largest size swept: from verify's
    pair launches, or a ``pairs`` file (one file of every pair's figures)."""
    files = list(files)
    rows = [
        r
        for _, f in files
        if f.kind == "pairs"
        for r in f.meta.get("pairs", [])
        if isinstance(r, dict) and isinstance(r.get("busbw"), int | float)
    ]
    rows += launched_pair_rows(files)
    if not rows:
        return []
    size = max(int(r.get("size_bytes") or 0) for r in rows)
    return [r for r in rows if int(r.get("size_bytes") or 0) == size]


def pair_figures(rows: list[dict[str, Any]], ratio: float) -> list[Figure]:
    """Each node's median pair busbw, judged against the median of the pairs it is not in
    (leave one out): on a ring of 3 nodes, two of the three pairs hold the slow node, and
    a median over all pairs would be its own slow figure."""
    if not rows:
        return []
    mine: dict[str, list[float]] = {}
    for r in rows:
        for n in (str(r["a"]), str(r["b"])):
            mine.setdefault(n, []).append(float(r["busbw"]))
    out = []
    for n, v in sorted(mine.items()):
        others = [float(r["busbw"]) for r in rows if n not in (str(r["a"]), str(r["b"]))]
        if not others:
            continue  # two nodes: no pair to compare with
        ref = statistics.median(others)
        out.append(
            Figure(
                n, "pair_busbw", statistics.median(v), None, all(x < ratio * ref for x in v), ref
            )
        )
    return out


def find(s: Summary) -> list[Record]:
    """Fill ``s.slow_nodes``, ``s.slow_reason`` and ``s.pairs``; the records to add: one per
    compared node (pass, or warn/fail for a named one), kind "slow-nodes"."""
    files = [(n, f) for n, nr in sorted(s.nodes.items()) for f in nr.files]
    modes = {
        f.mode
        for _, f in files
        if f.kind in ("smoke", "allreduce", "pairs", "train", "compute")
        or f.kind.startswith(PAIR_KIND_PREFIX)
    }
    mode = "gpu" if modes == {"gpu"} else "cpu"
    ratio = RATIO[mode]
    rows = pair_rows(files)
    if rows:
        s.pairs = {"rows": rows, "ratio": ratio}
    figures = [
        *local_busbw(files),
        *train_rates(files, set(s.nodes)),
        *pair_figures(rows, ratio),
        *compute_figures(files),
    ]
    figures = [f for f in figures if f.node in s.nodes]  # a pair row may name a stranger
    by_figure: dict[str, list[Figure]] = {}
    for fig in figures:
        by_figure.setdefault(fig.figure, []).append(fig)
    compared = {k: v for k, v in by_figure.items() if len(v) >= MIN_NODES}
    if not compared:
        s.slow_reason = (
            f"no figure measured on {MIN_NODES} or more nodes (local busbw, training "
            "samples/s, pair sweep, compute): no comparison"
        )
        return []
    medians = {k: statistics.median(f.value for f in v) for k, v in compared.items()}
    verdicts: dict[str, dict[str, tuple[Figure, bool]]] = {}
    for k, figs in compared.items():
        for fig in figs:
            slow = (
                bool(fig.all_pairs_slow)
                if fig.all_pairs_slow is not None
                else fig.value
                < FIGURE_RATIO.get(k, RATIO)[mode]
                * (fig.reference if fig.reference is not None else medians[k])
            )
            verdicts.setdefault(fig.node, {})[k] = (fig, slow)
    s.slow_reason = (
        f"{len(verdicts)} nodes compared with the fleet median ({', '.join(sorted(compared))}); "
        f"slow below {ratio} x median ({mode} mode)"
        + "".join(
            f"; {k} below {FIGURE_RATIO[k][mode]} x median"
            for k in sorted(compared)
            if k in FIGURE_RATIO
        )
    )
    out: list[Record] = []
    for node, mine in sorted(verdicts.items()):
        local = [mine[k] for k in LOCAL if k in mine]
        cross = [mine[k] for k in CROSS if k in mine]
        own = [mine[k] for k in SELF if k in mine]
        # the cross-node figures decide where there are any (a slow link shows only there;
        # a local figure alone, noisy on shared CPUs, names nobody); else the local one; a
        # slow compute figure names the node by itself
        links = any(slow for _, slow in (cross or local))
        named = links or any(slow for _, slow in own)
        evidence = (
            [fig for fig, slow in (*own, *((*cross, *local) if links else ())) if slow]
            if named
            else []
        )
        if not evidence:
            out.append(_record(node, "pass", "no figure below the fleet median's ratio", []))
            continue
        failed = any(f.floor is not None and f.value < f.floor for f in evidence)
        verdict = "fail" if failed else "warn"
        found = []
        for fig in evidence:
            med = fig.reference if fig.reference is not None else medians[fig.figure]
            entry: dict[str, Any] = {
                "node": node,
                "figure": fig.figure,
                "value": round(fig.value, 4),
                "median": round(med, 4),
                "ratio": round(fig.value / med, 3) if med else None,
                "verdict": verdict,
                "remedy": REMEDY,
            }
            s.slow_nodes.append(entry)
            found.append(entry)
        text = "; ".join(
            f"{e['figure']} {e['value']} {UNITS[e['figure']]} = {e['ratio']} x the median "
            f"{e['median']}"
            for e in found
        )
        out.append(_record(node, verdict, f"{node} is slow: {text}", found))
    return out


def _record(node: str, status: str, message: str, found: list[dict[str, Any]]) -> Record:
    return Record(
        name="slow-nodes:compare",
        status="fail" if status == "fail" else "warn" if status == "warn" else "pass",
        node=node,
        value=found[0]["ratio"] if found else None,
        threshold=None,
        message=message,
        remedy=REMEDY if found else "",
    )
