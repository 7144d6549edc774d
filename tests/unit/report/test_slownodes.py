"""gpufleet.report.slownodes: a throttled node among healthy ones is named with its ratio to
the fleet median, and nobody else; noisy healthy runs name nobody."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpufleet import report
from gpufleet.report import pairs
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.verify import bandwidth as bench


def _smoke(node: str, mode: str, busbw: float, floor: float | None = None) -> ResultFile:
    backend = "nccl" if mode == "gpu" else "gloo"
    rows = [
        BandwidthRow(**{**bench.make_row(s, "float32", 1e-3, 8, backend).to_dict(), "busbw": b})
        for s, b in ((2**20, busbw / 4), (2**23, busbw), (2**23, busbw * 1.02))
    ]
    rec = Record("test_allreduce_busbw", "pass", node=node, threshold=floor)
    return ResultFile("smoke", node, mode, "2026-01-01T00:00:00Z", records=[rec], bandwidth=rows)


def _run(tmp_path: Path, mode: str, busbw: dict[str, float], **kw: float | None) -> Path:
    d = tmp_path / "r"
    for node, b in busbw.items():
        _smoke(node, mode, b, kw.get("floor")).write(d / node / "smoke.json")
    return d


HEALTHY = {"n1": 100.0, "n2": 104.0, "n3": 98.0, "n4": 101.0, "n5": 99.0}


def test_one_throttled_gpu_node_is_named_with_its_ratio(tmp_path: Path) -> None:
    d = _run(tmp_path, "gpu", {**HEALTHY, "n4": 40.0})
    s = report.write_report(d, plot=False)
    assert [(f["node"], f["figure"], f["verdict"]) for f in s.slow_nodes] == [
        ("n4", "local_busbw", "warn")
    ]
    # each node: the median of its repeats (b, 1.02 b); the fleet median is n5's 99 x 1.01
    assert s.slow_nodes[0]["value"] == pytest.approx(40.4)
    assert s.slow_nodes[0]["median"] == pytest.approx(99.99)
    assert s.slow_nodes[0]["ratio"] == pytest.approx(40.4 / 99.99, abs=1e-3)
    assert s.status == "pass"  # a warning does not fail the run
    data = json.loads((d / "summary.json").read_text())
    assert data["slow_nodes"] == s.slow_nodes
    md = (d / "summary.md").read_text()
    assert "## Slow nodes" in md and "| n4 | local_busbw |" in md
    suite = next(
        x for x in ET.parse(d / "junit.xml").getroot() if x.get("name") == "cluster.slow-nodes"
    )
    assert suite.get("tests") == "5"  # a case per compared node


def test_below_the_floor_a_slow_node_fails_the_run(tmp_path: Path) -> None:
    d = _run(tmp_path, "gpu", {**HEALTHY, "n4": 40.0}, floor=50.0)
    s = report.collect(d)
    assert [(f["node"], f["verdict"]) for f in s.slow_nodes] == [("n4", "fail")]
    assert s.status == "fail"
    assert [n for n, _k, _r in s.failures()] == ["n4"]


def test_a_noisy_healthy_cpu_run_names_nobody(tmp_path: Path) -> None:
    # two shared cores: healthy nodes' local busbw 3x apart
    d = _run(tmp_path, "cpu", {"n1": 0.9, "n2": 2.7, "n3": 1.6, "n4": 2.0, "n5": 1.1})
    s = report.write_report(d, plot=False)
    assert s.slow_nodes == []
    assert "5 nodes compared" in s.slow_reason
    assert "Slow nodes: none." in (d / "summary.md").read_text()


def test_the_same_spread_names_the_node_in_gpu_mode(tmp_path: Path) -> None:
    d = _run(tmp_path, "gpu", {"n1": 0.9, "n2": 2.7, "n3": 1.6, "n4": 2.0, "n5": 1.1})
    assert {f["node"] for f in report.collect(d).slow_nodes} == {"n1", "n5"}


def test_two_nodes_are_not_compared(tmp_path: Path) -> None:
    s = report.collect(_run(tmp_path, "gpu", {"n1": 100.0, "n2": 10.0}))
    assert s.slow_nodes == []
    assert "no comparison" in s.slow_reason


def _pairs(d: Path, nodes: list[str], slow: set[str], busbw: float = 40.0) -> None:
    rows = [
        {"a": a, "b": b, "size_bytes": 2**30, "busbw": busbw / 3 if {a, b} & slow else busbw}
        for rnd in pairs.pair_rounds(nodes)
        for a, b in rnd
    ]
    rf = ResultFile("pairs", nodes[0], "gpu", "2026-01-01T00:00:00Z", meta={"pairs": rows})
    rf.write(d / nodes[0] / "pairs.json")
    (d / "run.json").write_text(json.dumps({"run_id": "r", "nodes": nodes}))


def test_a_pair_sweep_names_the_node_all_of_whose_pairs_are_slow(tmp_path: Path) -> None:
    nodes = [f"n{i}" for i in range(1, 9)]
    d = tmp_path / "r"
    _pairs(d, nodes, {"n5"})
    s = report.write_report(d)
    # n4 and n6 are in one slow pair each (with n5): only n5 has every pair slow
    assert [(f["node"], f["figure"]) for f in s.slow_nodes] == [("n5", "pair_busbw")]
    assert s.slow_nodes[0]["ratio"] == pytest.approx(1 / 3, abs=1e-3)
    page = (d / "index.html").read_text()
    # n5's two pairs, each drawn in both halves of the grid, each cell with its tooltip
    assert 'class="heatmap"' in page
    assert page.count("<title>n4 + n5: ") + page.count("<title>n5 + n6: ") == 4


def test_local_and_cross_evidence_must_agree(tmp_path: Path) -> None:
    # n4's local figure is low (noise), but its pairs are as fast as everyone's: not named
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    d = _run(tmp_path, "gpu", {**HEALTHY, "n4": 40.0})
    _pairs(d, nodes, set())
    assert report.collect(d).slow_nodes == []
    _pairs(d, nodes, {"n4"})  # now the pairs agree
    assert {f["figure"] for f in report.collect(d).slow_nodes} == {"local_busbw", "pair_busbw"}


def _launched_pairs(d: Path, nodes: list[str], slow: set[str], mode: str = "cpu") -> None:
    """As verify's pair sweep leaves them: pair-<round>-<index>.json on both nodes of a
    pair, the bandwidth rows on node rank 0's."""
    for r, rnd in enumerate(pairs.pair_rounds(nodes), 1):
        for i, (a, b) in enumerate(rnd):
            busbw = 0.1 if {a, b} & slow else 1.0
            rows = [BandwidthRow(**{**bench.make_row(s, "float32", 1e-3, 4, "gloo").to_dict(),
                                    "busbw": busbw * s / 2**23}) for s in (2**20, 2**23)]  # fmt: skip
            for rank, node in enumerate((a, b)):
                ResultFile(f"pair-{r}-{i}", node, mode, "2026-01-01T00:00:00Z",
                           records=[Record("allreduce_correctness", "pass", node=node)],
                           bandwidth=rows if rank == 0 else [],
                           meta={"node_rank": rank, "nnodes": 2}).write(
                    d / node / f"pair-{r}-{i}.json")  # fmt: skip


def test_a_throttled_link_is_named_by_the_pair_sweep_alone(tmp_path: Path) -> None:
    """A node whose cluster link is throttled: its local all-reduce is as fast as anyone's,
    both of its pairs are 10x slower; it is named (pair_busbw), nobody else."""
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    d = _run(tmp_path, "cpu", HEALTHY)
    _launched_pairs(d, nodes, {"n3"})
    (d / "run.json").write_text(json.dumps({"run_id": "r", "nodes": nodes}))
    s = report.write_report(d)
    assert [(f["node"], f["figure"]) for f in s.slow_nodes] == [("n3", "pair_busbw")]
    # against the median of the pairs n3 is not in (all 1.0)
    assert s.slow_nodes[0]["ratio"] == pytest.approx(0.1)
    assert s.slow_nodes[0]["median"] == pytest.approx(1.0)
    assert s.pairs is not None and len(s.pairs["rows"]) == len(nodes)
    assert {r["size_bytes"] for r in s.pairs["rows"]} == {2**23}
    assert 'class="heatmap"' in (d / "index.html").read_text()
    suites = [el.get("name") for el in ET.parse(d / "junit.xml").getroot()]
    assert "cluster.pair-sweep" in suites
    _launched_pairs(d, nodes, set())  # healthy: nobody
    assert report.collect(d).slow_nodes == []


def test_on_a_ring_of_three_the_slow_node_is_named_though_most_pairs_hold_it(
    tmp_path: Path,
) -> None:
    """3 nodes, 3 pairs, 2 of them with the throttled n3: the median of all pairs is slow,
    so each node is judged against the pairs it is not in (n3: the one fast pair)."""
    nodes = ["n1", "n2", "n3"]
    d = _run(tmp_path, "cpu", {"n1": 100.0, "n2": 101.0, "n3": 99.0})
    _launched_pairs(d, nodes, {"n3"})
    (d / "run.json").write_text(json.dumps({"run_id": "r", "nodes": nodes}))
    s = report.collect(d)
    assert [(f["node"], f["ratio"]) for f in s.slow_nodes] == [("n3", 0.1)]


def test_a_pair_with_one_result_missing_gives_no_row(tmp_path: Path) -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    d = tmp_path / "r"
    _launched_pairs(d, nodes, set())
    (d / "n2" / "pair-1-0.json").unlink()
    (d / "run.json").write_text(json.dumps({"run_id": "r", "nodes": nodes}))
    rows = report.collect(d).pairs
    assert rows is not None
    assert sorted((r["a"], r["b"]) for r in rows["rows"]) == [
        ("n2", "n3"),
        ("n3", "n4"),
        ("n4", "n1"),
    ]
