"""tests/bench/bench_report.py stays working: it runs at 20 nodes and its figures add up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_report


def test_the_report_benchmark_runs_at_20_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report-20.json"
    result = bench_report.main(["--nodes", "20", "--gpus", "2", "--out", str(out)])
    assert json.loads(out.read_text()) == result
    figs = {f["figure"]: f for f in result["figures"]}
    per_gpu, per_node = len(bench_report.CHECKS_PER_GPU), len(bench_report.CHECKS_NODE)
    # per node: checks, smoke (7), dcgm (6), probe (19 peers folded into 1), all-reduce (2); the first
    # node also the gate, training (5), its baseline (2) and the pair sweep (1); the report
    # adds one slow-node comparison per node
    expected = 20 * (2 * per_gpu + per_node + 7 + 6 + 1 + 2 + 1) + 1 + 5 + 2 + 1
    assert figs["records in the report"]["value"] == expected
    assert figs["result files"]["value"] == 20 * 5 + 3 + 1  # + train, baseline, pairs, run.json
    timed = figs["report summary, subprocess"]
    assert timed["target"] == bench_report.TARGET_S
    assert timed["verdict"] == ("met" if timed["value"] <= bench_report.TARGET_S else "missed")
    assert any(name.startswith("bisection schedule (") for name in figs)
    assert "pair schedule (2 rounds)" in figs
    assert "report summary, in process" in capsys.readouterr().out
