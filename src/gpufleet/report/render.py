"""Rendering: summary.md (Jinja2), the terminal table, and writing the report files of a run
(index.html: gpufleet.report.page)."""

# ruff: noqa: PLC0415  (jinja2 is imported lazily on purpose)

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpufleet.report import junit, page, training
from gpufleet.report.aggregate import collect, to_json, training_sections
from gpufleet.report.model import Summary
from gpufleet.units import human_size

#: the files ``gpufleet report summary`` writes into the run folder (every path that makes a
#: report goes through :func:`write_report`)
SUMMARY_FILES = ("summary.json", "summary.md", "index.html", "junit.xml")


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
    """Every file of SUMMARY_FILES from one ``to_json`` of the run; ``plot`` False leaves the
    pictures (inline SVG) out of index.html."""
    s = collect(run_dir)
    data = to_json(s)
    # one line: json's C encoder, where indent=2 takes the pure-Python one (half of the
    # report's time at 200 nodes, tests/bench/bench_report.py); `jq .` pretty-prints it
    text = json.dumps(data, default=str) + "\n"
    junit.write_bytes_atomic(s.run_dir / "summary.json", text.encode("utf-8"))
    (s.run_dir / "summary.md").write_text(render_markdown(s, data), encoding="utf-8")
    html = page.render_html(data, plot=plot)
    junit.write_bytes_atomic(s.run_dir / "index.html", html.encode("utf-8"))
    junit.write(s, s.run_dir / junit.FILE)
    return s


def update_latest(run_dir: Path) -> Path:
    """reports/latest -> <run-id> (relative link, replaced atomically)."""
    link = run_dir.parent / "latest"
    tmp = run_dir.parent / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    os.replace(tmp, link)
    return link
