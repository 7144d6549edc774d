"""index.html (gpufleet.report.page): rendered from summary.json, self-contained, every value
escaped, the nodes to look at first with their reproducers; no browser here (make
test-browser loads it in chromium)."""

from __future__ import annotations

import html as htmllib
import json
import re
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from bench import bench_report
from gpufleet import report
from gpufleet.report import page, pairs
from gpufleet.results import BandwidthRow, Record, ResultFile

EVIL = "<img src=x onerror=alert(1)>"
SCRIPT = "<script>alert('owned')</script>"


def _pairs_file(d: Path, nodes: list[str], slow: str = "") -> None:
    rows = [{"a": a, "b": b, "size_bytes": 2**30, "busbw": 10.0 if slow in (a, b) else 40.0}
            for rnd in pairs.pair_rounds(nodes) for a, b in rnd]  # fmt: skip
    ResultFile("pairs", nodes[0], "gpu", "2026-01-01T00:00:00Z", meta={"pairs": rows}).write(
        d / nodes[0] / "pairs.json"
    )


def _node(d: Path, node: str, status: str = "pass", message: str = "ok", run_id: str = "r") -> None:
    busbw = 300.0
    rows = [BandwidthRow(s, s // 4, "float32", 10.0, busbw / 1.75, busbw, 8, "nccl")
            for s in (2**20, 2**30)]  # fmt: skip
    ResultFile(
        "smoke", node, "gpu", "2026-01-01T00:00:00Z",
        records=[Record("test_ddp_loss_decreases", status, node=node, message=message,  # type: ignore[arg-type]
                        remedy="" if status == "pass" else "look at the rank logs")],
        bandwidth=rows, meta={"threshold": 250.0, "threshold_source": "table: 8 x H100"},
        run_id=run_id,
    ).write(d / node / "smoke.json")  # fmt: skip


def _page(d: Path) -> tuple[str, dict[str, Any]]:
    report.write_report(d)
    return (d / "index.html").read_text(), json.loads((d / "summary.json").read_text())


def test_every_value_is_escaped_a_script_in_a_name_or_message_is_inert(tmp_path: Path) -> None:
    d = tmp_path / "r"
    nodes = ["n1", EVIL, "n3"]
    for n in nodes:
        _node(d, n, "fail" if n == EVIL else "pass", message=f"rank 0 said {SCRIPT}")
    _pairs_file(d, nodes, slow=EVIL)
    (d / "run.json").write_text(json.dumps({"run_id": f"r{SCRIPT}", "nodes": nodes}))
    html, _ = _page(d)
    assert not re.search(r"<script|<img", html, re.IGNORECASE)  # the page has no element of either
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # the name shown as text
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;" in html
    body = html.split("<body>", 1)[1]
    # in the SVG too: the heatmap's labels and tooltips are text
    svg = body.split('class="heatmap"', 1)[1].split("</svg>", 1)[0]
    assert "&lt;img src=x onerror=alert(1)&gt;" in svg and "<img" not in svg


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    d = tmp_path / "r"
    bench_report.generate(d, 5, 2, faulty=2)
    html, _ = _page(d)
    assert "Content-Security-Policy" in html and "default-src &#39;none&#39;" not in html
    assert "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"" in html
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs and all(r.startswith("#") for r in refs), refs  # anchors in the page only
    assert not re.search(r"url\(|@import|<link|<script|<iframe|<object", html, re.IGNORECASE)


def test_the_nodes_to_look_at_come_first_failed_before_warned(tmp_path: Path) -> None:
    d = tmp_path / "r"
    bench_report.generate(d, 12, 2, faulty=3)  # gpu0003: a failed ECC check, slow pairs
    _node(d, "gpu0007", "warn", "loss flat", bench_report.RUN_ID)  # gpu0007's smoke: a warning
    html, data = _page(d)
    attention = html.split('id="attention"')[1].split('id="changes"')[0]
    headline = attention.split('<ul class="headline">')[1].split("</ul>")[0]
    assert headline.index("gpu0003") < headline.index("gpu0007")
    assert "2 of 12 nodes to look at" in attention
    cards = re.findall(r'<article class="card c-(\w+)" id="node-([^"]+)" data-node="[^"]+">', html)
    assert cards == [("fail", "gpu0003"), ("warn", "gpu0007")]
    card = html.split('data-node="gpu0003"')[1].split("</article>")[0]
    failed = next(r for r in data["nodes"]["gpu0003"]["records"] if r["status"] == "fail")
    assert failed["reproduce"]["command"] in htmllib.unescape(card)
    assert "test_memory.py::test_ecc_uncorrectable_volatile[gpu1]" in card
    assert "What to do:</b> drain the node" in card and "<dt>threshold</dt><dd>0</dd>" in card
    # every node has its line in "Every node", only the two have cards
    table = html.split('id="all-nodes"')[1]
    assert all(f"<td>{n}</td>" in table or f'href="#node-{n}"' in table for n in data["nodes"])


def test_a_card_names_where_a_threshold_came_from(tmp_path: Path) -> None:
    d = tmp_path / "r"
    _node(d, "n1")
    ResultFile("allreduce", "n1", "gpu", "2026-01-01T00:00:00Z",
               records=[Record("allreduce_busbw", "fail", node="n1", value=90.0, threshold=333.0,
                               message="busbw 90 GB/s is below 333", remedy="check the fabric")],
               meta={"threshold": 333.0, "threshold_source": "bandwidth table: 2 x 8 H100 IB"},
               ).write(d / "n1" / "allreduce.json")  # fmt: skip
    html, data = _page(d)
    (rec,) = [r for r in data["failures"] if r["name"] == "allreduce_busbw"]
    assert rec["threshold_source"] == "bandwidth table: 2 x 8 H100 IB"
    assert "<dt>from</dt><dd>bandwidth table: 2 x 8 H100 IB</dd>" in html
    assert "make verify on every node: the allreduce step needs them all" in html


@pytest.mark.parametrize(
    ("n", "shape"), [(3, "heatmap"), (24, "heatmap"), (25, "pairs"), (64, "pairs")]
)
def test_the_pair_picture_has_every_value_and_readable_labels(n: int, shape: str) -> None:
    nodes = [f"node{i:02d}" for i in range(n)]
    rows: list[dict[str, Any]] = [{"a": a, "b": b, "size_bytes": 2**30, "busbw": 40.0 + i % 5}
            for i, (a, b) in enumerate(p for rnd in pairs.pair_rounds(nodes) for p in rnd)]  # fmt: skip
    data = {"pairs": {"rows": rows, "ratio": 0.8}, "slow_nodes": [], "run": {"nodes": nodes}}
    svg, median = page.slow_picture(data)
    assert svg is not None and f'class="{shape}"' in svg
    assert median == statistics.median(r["busbw"] for r in rows)
    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    sizes = [float(t.get("font-size", 0)) for t in root.iter("{http://www.w3.org/2000/svg}text")
             if t.text in nodes]  # fmt: skip
    assert min(sizes) >= 11 and {
        t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
    } >= set(nodes)
    values = [t for t in texts if re.fullmatch(r"(node\d+ )?\d+\.\d", t)]
    assert len(values) == 2 * len(rows)  # each pair in two cells (both halves, both nodes' rows)
    assert float(root.get("width", 0)) <= (1366 if n > 3 else 600)  # a laptop screen wide


def test_above_64_nodes_the_lowest_pairs_are_shown_lowest_first() -> None:
    nodes = [f"n{i:03d}" for i in range(100)]
    rows = [{"a": a, "b": b, "size_bytes": 2**30, "busbw": 10.0 if "n042" in (a, b) else 40.0}
            for rnd in pairs.pair_rounds(nodes) for a, b in rnd]  # fmt: skip
    data = {"pairs": {"rows": rows, "ratio": 0.8}, "slow_nodes": [{"node": "n042"}],
            "run": {"nodes": nodes}}  # fmt: skip
    svg, _ = page.slow_picture(data)
    assert svg is not None and "the 64 nodes with the lowest median pair figure" in svg
    labels = re.findall(r'text-anchor="end"[^>]*>(n\d{3})</text>', svg)
    assert len(labels) == page.ROWS_MAX and labels[0] == "n042"


def test_one_small_chart_per_source_with_its_gate_and_profile_floor(tmp_path: Path) -> None:
    d = tmp_path / "r"
    bench_report.generate(d, 3, 8)
    html, data = _page(d)
    charts = page.bandwidth_charts(data)
    titles = [htmllib.unescape(re.findall(r'aria-label="([^"]+)"', c)[0]) for c in charts]
    assert titles == [
        "cluster all-reduce: busbw",
        "single-node all-reduce (each node's own): busbw",
    ]
    assert "gate 333 GB/s at the largest size (bench)" in charts[0]
    floor = {**data, "nodes": {**data["nodes"], "gpu0000": {**data["nodes"]["gpu0000"], "floors": [
        {"floor": "allreduce_busbw_gbs", "profile": "hgx-h100-8gpu", "status": "fail",
         "expected": 460.0, "floor_size_bytes": 2**34}]}}}  # fmt: skip
    assert "floor 460 GB/s at 16G (profile hgx-h100-8gpu)" in page.bandwidth_charts(floor)[1]
    assert all(c in html for c in charts)


def test_no_plot_leaves_the_pictures_out(tmp_path: Path) -> None:
    d = tmp_path / "r"
    bench_report.generate(d, 3, 2)
    report.write_report(d, plot=False)
    html = (d / "index.html").read_text()
    assert "<svg" not in html and "Pictures left out (gpufleet report --no-plot)" in html
    assert "gpu0002" in html


@pytest.mark.parametrize(("seconds", "text"), [(None, "unknown"), (40, "40 s"), (420, "7 min"),
                                               (15120, "4 h 12 min"), (183600, "2 d 3 h")])  # fmt: skip
def test_age_text(seconds: int | None, text: str) -> None:
    assert page.age_text(seconds) == text
