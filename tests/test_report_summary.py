"""Aggregation of a verify run (gpufleet.report)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpufleet import bench, report
from gpufleet.commands import report as cmd
from gpufleet.errors import RefusedError
from gpufleet.results import Record, ResultFile, Status

JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="checks.test_gpu" name="test_gpu_count"/>
<testcase classname="checks.test_gpu" name="test_ecc">
<failure message="2 uncorrectable"/></testcase>
<testcase classname="checks.test_gpu" name="test_nvlink"><skipped message="no NVLink"/></testcase>
</testsuite></testsuites>"""


def _smoke(node: str, status: Status = "pass", n: int = 3) -> ResultFile:
    rows = [bench.make_row(s, "float32", s / 1e9, n, "gloo") for s in (4096, 2**20)]
    return ResultFile(
        kind="smoke",
        node=node,
        mode="cpu",
        started="2026-01-01T00:00:00Z",
        records=[
            Record("test_ddp_loss_decreases", status, node=node, message="loss", remedy="do X")
        ],
        bandwidth=rows,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "reports" / "r1"
    _smoke("n1").write(d / "n1" / "smoke.json")
    (d / "n2").mkdir(parents=True)
    (d / "n2" / "checks.xml").write_text(JUNIT)
    (d / "n2" / "allreduce.log").write_text("...\nERROR: torchrun ran past 300s and was killed\n")
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r1",
                "nodes": ["n1", "n2", "n3"],
                "mode": "cpu",
                "expect": {"smoke": ["n1"], "allreduce": ["n2"], "checks": ["n3"]},
            }
        )
    )
    return d


def test_collect_turns_missing_results_into_named_failures(run_dir: Path) -> None:
    s = report.collect(run_dir)
    fails = {(n, r.name) for n, _k, r in s.failures()}
    assert ("n2", "checks:test_ecc") in fails  # from JUnit when no JSON
    assert ("n2", "allreduce:result") in fails  # expected, absent, log tail explains
    assert ("n3", "checks:result") in fails  # node gave nothing at all
    n2 = next(r for n, _k, r in s.failures() if n == "n2" and r.name == "allreduce:result")
    assert "ran past 300s" in n2.message
    assert "firewalld" in n2.remedy
    assert s.exit_code == 1
    assert s.status == "fail"


def test_write_report_renders_all_three_files(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = report.main([str(run_dir), "--latest"])
    assert rc == 1
    for name in report.SUMMARY_FILES:
        assert (run_dir / name).stat().st_size > 0, name
    assert (run_dir / "bandwidth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((run_dir / "summary.json").read_text())
    assert data["status"] == "fail"
    assert data["exit_code"] == 1
    assert data["counts"]["fail"] == 3
    assert data["counts"]["skip"] == 1
    assert data["busbw_factors"] == {"3": pytest.approx(4 / 3, rel=1e-5)}
    for row in data["bandwidth"]:
        assert row["busbw"] == pytest.approx(row["algbw"] * 4 / 3, rel=1e-3)
    md = (run_dir / "summary.md").read_text()
    assert "## Failures" in md
    assert "n3" in md
    assert "bandwidth.png" in md
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert "n2" in out
    assert "summary.md" in out
    assert (run_dir.parent / "latest").resolve() == run_dir.resolve()


def test_all_pass_exits_zero(tmp_path: Path) -> None:
    d = tmp_path / "r2"
    _smoke("n1").write(d / "n1" / "smoke.json")
    assert report.main([str(d), "--quiet", "--no-plot"]) == 0
    assert json.loads((d / "summary.json").read_text())["status"] == "pass"


def test_unreadable_result_file_fails(tmp_path: Path) -> None:
    d = tmp_path / "r3" / "n1"
    d.mkdir(parents=True)
    (d / "smoke.json").write_text('{"schema": 99}')
    s = report.collect(d.parent)
    assert [r.name for _n, _k, r in s.failures()] == ["smoke:result"]


def test_missing_run_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="not a directory"):
        report.collect(tmp_path / "nope")


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring_pair_rounds_cover_the_ring_without_sharing_a_node(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = report.ring_pair_rounds(nodes)
    pairs = [tuple(p) for r in rounds for p in r]
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members)), f"node twice in a round: {r}"
    if n >= 3:
        assert sorted(pairs) == sorted((nodes[k], nodes[(k + 1) % n]) for k in range(n))
        assert len(rounds) == (2 if n % 2 == 0 else 3)


def test_pair_analysis_names_the_node_common_to_failing_pairs(tmp_path: Path) -> None:
    d = tmp_path / "r4"
    nodes = ["a", "b", "c", "d"]
    pairs = [p for r in report.ring_pair_rounds(nodes) for p in r]
    for x, y in pairs:
        bad = "c" in (x, y)
        for node in (x, y):
            ResultFile(
                kind=f"pair-{x}-{y}",
                node=node,
                mode="gpu",
                started="t",
                records=[Record("allreduce_busbw", "fail" if bad else "pass", node=node)],
            ).write(d / node / f"pair-{x}-{y}.json")
    (d / "run.json").write_text(json.dumps({"nodes": nodes, "pairs": pairs}))
    s = report.collect(d)
    assert s.suspects == ["c"]
    assert "Node(s) at fault (pair reruns): c" in report.table(s)


def test_report_subcommand_registers() -> None:
    p = argparse.ArgumentParser()
    cmd.register(p.add_subparsers(dest="command"))
    args = p.parse_args(["report", "reports/x", "--no-plot"])
    assert args.func is report.run
    assert args.no_plot


LOGS = Path(__file__).parent / "fixtures" / "logs"


def test_root_cause_names_the_rank_a_signal_killed() -> None:
    # torchrun's own output on the testbed node whose rank was SIGKILLed (tests/test_faults.py)
    cause = report.root_cause((LOGS / "torchrun-rank-sigkill.log").read_text())
    assert cause == {
        "host": "node2",
        "time": "2026-11-30_18:10:36",
        "rank": 3,
        "local_rank": 1,
        "exitcode": -9,
        "signal": "SIGKILL",
    }


def test_root_cause_of_a_peer_that_failed_by_itself_has_no_signal() -> None:
    cause = report.root_cause((LOGS / "torchrun-peer-gone.log").read_text())
    assert cause["exitcode"] == 1 and "signal" not in cause
    assert report.root_cause("no torchrun output here") == {}


def test_a_signal_killed_rank_makes_its_node_the_suspect(tmp_path: Path) -> None:
    run = tmp_path / "r1"
    for node, log in (("node1", "torchrun-peer-gone.log"), ("node2", "torchrun-rank-sigkill.log")):
        (run / node).mkdir(parents=True)
        (run / node / "allreduce.log").write_text((LOGS / log).read_text())
    (run / "run.json").write_text(
        json.dumps({"run_id": "r1", "nodes": ["node1", "node2"], "expect": {}, "pairs": []})
    )
    s = report.collect(run)
    assert s.suspects == ["node2"] and s.suspect_reason == "killed by a signal"
    assert "Node(s) at fault (killed by a signal): node2" in report.table(s)
    msgs = [r.message for r in s.nodes["node2"].records if r.name == "allreduce:signal"]
    assert msgs and "killed by SIGKILL" in msgs[0]
    assert not [r for r in s.nodes["node1"].records if r.name == "allreduce:signal"]
