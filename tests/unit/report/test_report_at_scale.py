"""The report of a large run stays readable: summary.md lists each node's records that did
not pass (above DETAIL_NODES nodes), index.html's single-node chart draws the nodes' spread
and names the slowest (above page.MAX_LINES series). summary.json keeps every record."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet import report
from gpufleet.report import page, render
from gpufleet.results import Record, ResultFile
from gpufleet.verify import bandwidth as bench


def _run(tmp_path: Path, n: int, slow: str = "", bad: str = "") -> Path:
    d = tmp_path / "big"
    nodes = [f"h{i:03d}" for i in range(n)]
    for node in nodes:
        bw = 1.0 if node == slow else 10.0
        rows = [bench.make_row(s, "float32", s / (bw * 1e9), 8, "nccl") for s in (2**20, 2**26)]
        recs = [Record("gpu_ecc", "fail" if node == bad else "pass", node=node, message="ecc"),
                Record("gpu_temp", "pass", node=node, message="42 C")]  # fmt: skip
        ResultFile(kind="smoke", node=node, mode="gpu", started="2026-01-01T00:00:00Z",
                   records=recs, bandwidth=rows).write(d / node / "smoke.json")  # fmt: skip
    run = {"run_id": "big", "nodes": nodes, "mode": "gpu", "expect": {"smoke": nodes}}
    (d / "run.json").write_text(json.dumps(run))
    return d


def test_a_large_run_lists_what_did_not_pass_and_counts_the_rest(tmp_path: Path) -> None:
    n = render.DETAIL_NODES + 1
    d = _run(tmp_path, n, bad="h007")
    s = report.write_report(d, plot=False)
    md = (d / "summary.md").read_text()
    data = json.loads((d / "summary.json").read_text())
    passed = {k: sum(r["status"] == "pass" for r in v["records"]) for k, v in data["nodes"].items()}
    assert passed["h007"] == passed["h008"] - 1 and passed["h008"] >= 2
    per_node = md.split("## Per node")[1]
    assert "| smoke | gpu_ecc | fail |" in per_node and per_node.count("| smoke | gpu_") == 1
    assert f"### h007 (gpu)\n\n{passed['h007']} records passed.\n" in md
    assert f"### h008 (gpu)\n\n{passed['h008']} records passed, none other.\n" in md
    assert f"{n} nodes: each node's records that did not pass are listed" in md
    assert s.status == "fail"


def test_a_small_run_lists_every_record(tmp_path: Path) -> None:
    d = _run(tmp_path, render.DETAIL_NODES, bad="h007")
    report.write_report(d, plot=False)
    md = (d / "summary.md").read_text()
    assert md.count("| smoke | gpu_temp | pass |") == render.DETAIL_NODES
    assert "records passed" not in md


def test_many_nodes_are_drawn_as_a_spread_with_the_slowest_named(tmp_path: Path) -> None:
    d = _run(tmp_path, page.MAX_LINES + 1, slow="h004")
    report.write_report(d)
    data = json.loads((d / "summary.json").read_text())
    (chart,) = page.bandwidth_charts(data)  # the smoke rows only: one source, one chart
    assert chart in (d / "index.html").read_text()  # the page draws it from summary.json
    assert f"{page.MAX_LINES + 1} series: lowest to highest" in chart
    assert chart.count("<polyline") == page.SLOWEST_SHOWN + 1  # the lines and the band's median
    assert "h004 (8 ranks, nccl, smoke)" in chart  # the slow one is named
    named = [
        n for n in (f"h{i:03d}" for i in range(page.MAX_LINES + 1)) if f"{n} (8 ranks" in chart
    ]
    assert len(named) == page.SLOWEST_SHOWN
    few = {**data, "bandwidth": [r for r in data["bandwidth"] if r["node"] != "h000"]}
    (chart,) = page.bandwidth_charts(few)
    assert "series: lowest to highest" not in chart and chart.count("<polyline") == page.MAX_LINES
