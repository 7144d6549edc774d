"""Rendering: summary.md (Jinja2), bandwidth.png (matplotlib, Agg), the terminal table,
and writing the report files of a run."""

# ruff: noqa: PLC0415  (jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpufleet.report import junit, training
from gpufleet.report.aggregate import collect, to_json, training_sections
from gpufleet.report.model import Summary
from gpufleet.results import BandwidthRow
from gpufleet.units import human_size

SUMMARY_FILES = ("summary.json", "summary.md", "bandwidth.png", "junit.xml")


#: above this many nodes summary.md lists each node's records that did not pass (with the
#: count that did) and the slowest training ranks, not every record and rank: 1000 nodes
#: leave 120,000 records, which summary.json and junit.xml hold in full
DETAIL_NODES = 32
#: training ranks listed in summary.md above DETAIL_NODES: the slowest ones
SLOWEST_RANKS = 16


def markdown_view(data: dict[str, Any]) -> dict[str, Any]:
    """What summary.md shows of ``data`` (``to_json``): everything up to DETAIL_NODES nodes;
    above, per node the records that did not pass and the count that did, and the
    SLOWEST_RANKS slowest training ranks."""
    nodes = data["nodes"]
    if len(nodes) <= DETAIL_NODES:
        return {**data, "brief": False}
    brief_nodes = {}
    for name, n in nodes.items():
        shown = [r for r in n["records"] if r["status"] != "pass"]
        passed = len(n["records"]) - len(shown)
        brief_nodes[name] = {**n, "records": shown, "passed": passed}
    view = {**data, "nodes": brief_nodes, "brief": True}
    if data.get("training"):
        ranks = data["training"].get("ranks") or []
        slowest = sorted(ranks, key=lambda r: r.get("samples_per_s") or 0.0)[:SLOWEST_RANKS]
        view["training"] = {**data["training"], "ranks": slowest, "ranks_total": len(ranks)}
    return view


def render_markdown(s: Summary, data: dict[str, Any] | None = None) -> str:
    """summary.md; ``data``: ``to_json(s)`` when already built (it is not rebuilt)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("gpufleet", "templates"),
        autoescape=False,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    view = markdown_view(to_json(s) if data is None else data)
    return env.get_template("summary.md.j2").render(s=view)


#: above this many single-node series, bandwidth.png draws their spread (min to max and the
#: median per size) and only the SLOWEST_SHOWN slowest nodes as lines: a legend of 1000
#: nodes is unreadable and costs minutes to lay out
MAX_NODE_LINES = 8
SLOWEST_SHOWN = 3


def _bandwidth_series(s: Summary) -> dict[str, list[BandwidthRow]]:
    series: dict[str, list[BandwidthRow]] = {}
    for kind, node, row in s.bandwidth():
        what = {"allreduce": "cluster", "smoke": "single-node"}.get(kind, kind)
        label = f"{what} ({node}, n={row.world_size}, {row.backend})"
        series.setdefault(label, []).append(row)
    return {k: sorted(v, key=lambda r: r.size_bytes) for k, v in sorted(series.items())}


def _fold_single_node(
    series: dict[str, list[BandwidthRow]],
) -> tuple[dict[str, list[BandwidthRow]], dict[int, list[float]]]:
    """Series to draw as lines and, when the single-node series are too many, the busbw of
    every node per message size (drawn as a band); the slowest nodes at the largest size
    stay lines, so the one to look at is named."""
    single = {k: v for k, v in series.items() if k.startswith("single-node")}
    if len(single) <= MAX_NODE_LINES:
        return series, {}
    spread: dict[int, list[float]] = {}
    for rows in single.values():
        for r in rows:
            spread.setdefault(r.size_bytes, []).append(r.busbw)
    slowest = sorted(single, key=lambda k: (single[k][-1].busbw, k))[:SLOWEST_SHOWN]
    keep = {k: v for k, v in series.items() if k not in single or k in slowest}
    return keep, spread


def plot_bandwidth(s: Summary, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    series, spread = _fold_single_node(_bandwidth_series(s))
    if spread:
        xs = sorted(spread)
        ax.fill_between(
            xs,
            [min(spread[x]) for x in xs],
            [max(spread[x]) for x in xs],
            color="grey",
            alpha=0.25,
            label=f"busbw single-node, {len(spread[xs[-1]])} nodes: min to max",
        )
        ax.plot(
            xs,
            [sorted(spread[x])[len(spread[x]) // 2] for x in xs],
            color="grey",
            label="busbw single-node: median",
        )
    for label, rows in series.items():
        xs = [r.size_bytes for r in rows]
        (line,) = ax.plot(xs, [r.busbw for r in rows], marker="o", label=f"busbw {label}")
        ax.plot(
            xs,
            [r.algbw for r in rows],
            marker=".",
            linestyle="--",
            alpha=0.6,
            color=line.get_color(),
            label=f"algbw {label}",
        )
    gates = [
        f.meta["threshold"] for nr in s.nodes.values() for f in nr.files if f.meta.get("threshold")
    ]
    threshold = gates[0] if gates else None
    if threshold:
        ax.axhline(float(threshold), color="red", linestyle=":", label=f"gate {threshold} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s (10^9)")
    ax.set_title(f"all-reduce bandwidth, run {s.run_id}")
    ax.grid(True, which="both", alpha=0.3)
    if series:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no bandwidth rows in this run", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_pairs(s: Summary, path: Path) -> Path | None:
    """pairs.png: the pair sweep's busbw as a nodes x nodes heatmap (None: no sweep)."""
    if not s.pairs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = s.pairs["rows"]
    names = sorted({str(r[k]) for r in rows for k in ("a", "b")})
    at = {n: i for i, n in enumerate(names)}
    grid = np.full((len(names), len(names)), np.nan)
    for r in rows:
        i, j = at[str(r["a"])], at[str(r["b"])]
        grid[i, j] = grid[j, i] = float(r["busbw"])
    side = min(12.0, 3 + 0.25 * len(names))
    fig, ax = plt.subplots(figsize=(side, side), dpi=100)
    im = ax.imshow(grid, cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=ax, label="busbw GB/s (10^9)")
    if len(names) <= 64:
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
        ax.set_yticks(range(len(names)), names, fontsize=6)
    ax.set_title(f"pair all-reduce busbw, run {s.run_id}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def table(s: Summary) -> str:
    """Plain-text table for the terminal."""
    lines = [f"gpufleet verify run {s.run_id}: {s.status.upper()}  ({s.run_dir})", ""]
    cols = list(s.counts())  # every known status, then any other one seen in this run
    width = {c: max(5, len(c)) for c in cols}
    head = f"{'node':<20} {'suite':<18} " + " ".join(f"{c:>{width[c]}}" for c in cols)
    lines += [head, "-" * len(head)]
    for n, nr in sorted(s.nodes.items()):
        per: dict[str, dict[str, int]] = {}
        for kind, r in nr.all_records():
            per.setdefault(kind, dict.fromkeys(cols, 0))
            per[kind][r.status] += 1
        if not per:
            lines.append(f"{n:<20} {'(no results)':<18}")
        for kind, c in sorted(per.items()):
            lines.append(f"{n:<20} {kind:<18} " + " ".join(f"{c[x]:>{width[x]}}" for x in cols))
    bw = s.bandwidth()
    if bw:
        lines += [
            "",
            f"{'source':<22} {'node':<14} {'n':>3} {'size':>8} {'time_us':>11} "
            f"{'algbw':>9} {'busbw':>9} {'wrong':>6}",
        ]
        for kind, n, b in bw:
            lines.append(
                f"{kind:<22} {n:<14} {b.world_size:>3} {human_size(b.size_bytes):>8} "
                f"{b.time_us:>11.1f} {b.algbw:>9.3f} {b.busbw:>9.3f} {b.wrong:>6}"
            )
    lines += training.training_lines(training_sections(s)["training"])
    for f in s.slow_nodes:
        lines.append(
            f"SLOW ({f['verdict']}) {f['node']}: {f['figure']} {f['value']} = {f['ratio']} x "
            f"the fleet median {f['median']}"
        )
    fails = s.failures()
    if fails:
        lines += ["", "FAILURES:"]
        for n, kind, r in fails:
            lines.append(f"  [{n}] {kind}/{r.name}: {r.message}".rstrip())
            if r.remedy:
                lines.append(f"      -> {r.remedy}")
    if s.suspects:
        lines += ["", f"Node(s) at fault ({s.suspect_reason}): " + ", ".join(s.suspects)]
    elif s.bisect_results:
        lines += ["", f"No single node at fault ({s.bisect_reason})"]
    if s.bisect_results and len(s.suspects) > 1:
        lines.append(
            "  (not one bad node: look at what they share - the threshold, the "
            "fabric/switch, nccl.env)"
        )
    return "\n".join(lines)


def write_report(run_dir: str | os.PathLike[str], *, plot: bool = True) -> Summary:
    s = collect(run_dir)
    data = to_json(s)
    # one line: json's C encoder, where indent=2 takes the pure-Python one (half of the
    # report's time at 200 nodes, tests/bench/bench_report.py); `jq .` pretty-prints it
    text = json.dumps(data, default=str) + "\n"
    junit.write_bytes_atomic(s.run_dir / "summary.json", text.encode("utf-8"))
    (s.run_dir / "summary.md").write_text(render_markdown(s, data), encoding="utf-8")
    junit.write(s, s.run_dir / junit.FILE)
    if plot:
        plot_bandwidth(s, s.run_dir / "bandwidth.png")
        plot_pairs(s, s.run_dir / "pairs.png")
    return s


def update_latest(run_dir: Path) -> Path:
    """reports/latest -> <run-id> (relative link, replaced atomically)."""
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link
