"""Runs the node smoke suite (smoke_tests/) on this CPU machine: 2 gloo ranks via torchrun,
and asserts what it wrote (records, mode, bandwidth rows), not only its exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("smoke")
    env = dict(os.environ, PYTHONPATH=str(repo_root / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(repo_root / "smoke_tests"),
            "-p",
            "no:cacheprovider",
            f"--gpufleet-json={out / 'smoke.json'}",
            f"--junitxml={out / 'smoke.xml'}",
            "--node=testnode",
            "--cpu-nproc=2",
            "--gpufleet-timeout=30",
            "--launch-timeout=120",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=repo_root,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    data: dict[str, Any] = json.loads((out / "smoke.json").read_text())
    data["_junit"] = ET.parse(out / "smoke.xml").getroot()
    data["_stdout"] = proc.stdout
    return data


def _rec(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in data["records"] if r["name"] == name)


def test_envelope_names_mode_backend_and_node(suite: dict[str, Any]) -> None:
    assert suite["kind"] == "smoke"
    assert suite["mode"] == "cpu"
    assert suite["node"] == "testnode"
    assert suite["meta"]["backend"] == "gloo"
    assert suite["meta"]["nproc"] == 2
    assert "mode cpu, backend gloo, 2 CPU ranks" in suite["_stdout"]
    assert all(r["message"].startswith("[cpu/gloo]") for r in suite["records"])


@pytest.mark.parametrize(
    "name",
    [
        "test_ddp_launch_and_teardown",
        "test_ddp_sampler_shards_disjoint_and_cover",
        "test_ddp_sampler_set_epoch_reshuffles",
        "test_ddp_loss_decreases",
        "test_ddp_parameters_identical_on_all_ranks",
        "test_allreduce_sum_exact",
        "test_allreduce_bandwidth",
        "test_amp_step[cpu-bf16]",
    ],
)
def test_cpu_properties_pass(suite: dict[str, Any], name: str) -> None:
    assert _rec(suite, name)["status"] == "pass"


@pytest.mark.parametrize(
    "name",
    [
        "test_dataparallel_matches_single_device",
        "test_amp_step[cuda-fp16-gradscaler]",
        "test_amp_step[cuda-bf16]",
    ],
)
def test_gpu_only_tests_skip_with_a_reason(suite: dict[str, Any], name: str) -> None:
    rec = _rec(suite, name)
    assert rec["status"] == "skip"
    assert "CUDA" in rec["message"]


def test_cpu_impossible_features_skip_never_pass(suite: dict[str, Any]) -> None:
    dp = _rec(suite, "test_dataparallel_matches_single_device")
    assert "at least 2 CUDA devices" in dp["message"]
    sbn = _rec(suite, "test_syncbn_running_stats_match_global_batch")
    assert sbn["status"] == "skip"
    assert "SyncBatchNorm needs an accelerator" in sbn["message"]
    assert "expected input tensor to be on GPU" in sbn["message"]
    names = {r["name"] for r in suite["records"]}
    assert "test_dataparallel_cpu_passthrough" not in names


def test_loss_value_is_recorded(suite: dict[str, Any]) -> None:
    loss = _rec(suite, "test_ddp_loss_decreases")
    assert loss["value"] < loss["threshold"]


def test_bandwidth_rows_follow_nccl_tests(suite: dict[str, Any]) -> None:
    rows = suite["bandwidth"]
    assert [r["size_bytes"] for r in rows] == [4096, 65536, 2**20, 8 * 2**20]
    for r in rows:
        assert r["world_size"] == 2
        assert r["backend"] == "gloo"
        assert r["wrong"] == 0
        assert r["busbw"] == pytest.approx(r["algbw"] * 1.0, rel=1e-3)  # 2(n-1)/n, n=2
        assert r["algbw"] == pytest.approx(r["size_bytes"] / r["time_us"] / 1e3, rel=1e-3)
    assert suite["meta"]["time"] == "max over ranks of the per-iteration mean"
    assert suite["meta"]["threshold"] is None


def test_junit_matches_the_json(suite: dict[str, Any]) -> None:
    cases = list(suite["_junit"].iter("testcase"))
    assert len(cases) == len(suite["records"])


def test_a_failed_smoke_test_is_reproduced_by_the_report_s_command(
    repo_root: Path, tmp_path: Path
) -> None:
    """The bandwidth gate failed (an impossible --busbw-min): the reproducer the report derives
    from smoke.json's meta.rerun reruns that one test, with the same options, and it fails
    again."""
    from gpufleet import report
    from gpufleet.results import load_result_file

    env = dict(os.environ, PYTHONPATH=str(repo_root / "src"))
    run = tmp_path / "reports" / "r"
    argv = [sys.executable, "-m", "pytest", str(repo_root / "smoke_tests"), "-p",
            "no:cacheprovider", f"--gpufleet-json={run / 'n1' / 'smoke.json'}",
            "--node=n1", "--cpu-nproc=2", "--busbw-min=1000000", "-k", "allreduce_bandwidth"]  # fmt: skip
    first = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env,
                           cwd=tmp_path, check=False)  # fmt: skip
    assert first.returncode == 1, first.stdout[-3000:]
    (run / "run.json").write_text(json.dumps({"run_id": "r", "nodes": ["n1"]}))
    data = report.to_json(report.collect(run))
    (failed,) = [r for r in data["nodes"]["n1"]["records"] if r["status"] == "fail"]
    assert failed["name"] == "test_allreduce_bandwidth"
    how = failed["reproduce"]
    assert how["where"] == "n1" and "test_allreduce.py::test_allreduce_bandwidth" in how["command"]
    again = tmp_path / "again.json"
    proc = subprocess.run(["bash", "-c", f"{how['command']} --gpufleet-json={again}"],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:]
    (only,) = [r for r in load_result_file(again).records if r.name.startswith("test_")]
    assert (only.name, only.status) == ("test_allreduce_bandwidth", "fail")
