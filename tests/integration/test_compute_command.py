"""``gpufleet compute`` on this CPU machine, as verify runs it on a CPU node: the sweep, the
digests, the records and the result file; two devices in processes of their own (the path
every GPU takes, here with the CPU standing in for each GPU); a short burn-in. The figures are
recomputed from what the result file recorded, not taken from its verdicts."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.node import compute, compute_run

pytestmark = pytest.mark.slow


def _compute(repo: Path, out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    env = dict(os.environ, PYTHONPATH=str(repo / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufleet",
            "compute",
            "--node",
            "n1",
            "--output",
            str(out),
            "--budget",
            "2",
            "--repeats",
            "3",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def test_a_cpu_node_measures_one_device_and_judges_it(repo_root: Path, tmp_path: Path) -> None:
    rc, data, out = _compute(repo_root, tmp_path / "compute.json")
    assert rc == 0, out
    assert data["kind"] == "compute" and data["mode"] == "cpu"
    (fig,) = [compute.DeviceFigure.from_dict(f) for f in data["meta"]["figures"]]
    assert fig.device == "cpu" and fig.dtype == "float32"
    assert [(s.m, s.n, s.k) for s in fig.shapes] == [(256, 256, 256), (512, 512, 512)]
    assert fig.tflops == max(s.tflops for s in fig.shapes) > 0  # the best shape's median
    assert len(fig.digests) == 2 and fig.digests[0] == fig.digests[1]
    names = {r["name"]: r for r in data["records"]}
    assert names["compute_matmul"]["status"] == "pass" and names["sdc_repeat"]["status"] == "pass"
    assert names["compute_floor"]["status"] == "skip"  # simulated-cpu has no floor, said so
    assert data["meta"]["profile"] == "simulated-cpu" and data["meta"]["spread_fraction"] == 0.5
    key = data["meta"]["sdc_key"]
    assert key["software"].startswith("torch ") and "256x256" in key["params"]


def test_the_digest_is_the_same_run_after_run(repo_root: Path, tmp_path: Path) -> None:
    _, a, _ = _compute(repo_root, tmp_path / "a.json", "--sdc-repeats", "1")
    _, b, _ = _compute(repo_root, tmp_path / "b.json", "--sdc-repeats", "1", "--shapes", "128")
    assert a["meta"]["figures"][0]["digests"] == b["meta"]["figures"][0]["digests"]


def test_devices_in_processes_of_their_own_start_together(tmp_path: Path) -> None:
    opts = compute_run.Options(
        node="n1",
        shapes="128",
        warmup=1,
        repeats=2,
        budget_s=2,
        sdc_size=64,
        devices=("cpu", "cpu"),
    )
    results, samples = compute_run.run_devices(["cpu", "cpu"], opts)
    assert [r.error for r in results] == ["", ""] and samples == []
    assert all(r.figures[0].tflops > 0 for r in results)
    assert results[0].figures[0].digests == results[1].figures[0].digests
    records = compute_run.compute_records(
        "n1", results, compute_run.Tolerances(None, 10.0 / 11, "test", 0.5, "test", None)
    )
    spread = [r for r in records if r.name == compute.SPREAD]
    assert len(spread) == 2 and all("x the node's best" in r.message for r in spread)


def test_a_short_burn_in_reports_its_intervals(repo_root: Path, tmp_path: Path) -> None:
    rc, data, out = _compute(
        repo_root,
        tmp_path / "burnin.json",
        "--burnin",
        "3",
        "--interval",
        "0.5",
        "--sdc-repeats",
        "0",
    )
    assert rc == 0, out
    assert data["kind"] == "burnin" and data["meta"]["duration_s"] == 3.0
    series = data["meta"]["series"]["cpu"]
    assert len(series) >= 4 and series[-1][0] >= 3.0 and all(v > 0 for _, v in series)
    names = {r["name"]: r for r in data["records"]}
    assert names["burnin_compute_drop"]["status"] in ("pass", "fail")
    assert (
        names["burnin_throttle"]["status"] == "skip" and names["burnin_samples"]["status"] == "pass"
    )
    (summary,) = data["meta"]["summary"]
    assert summary["intervals"] == len(series)


_HELD_CHILD = """
import sys, torch
from gpufleet.node import compute_bench as cb
def once():
    return cb.measure("cpu", "float32", [(512, 512, 512)], repeats=3, min_time_s=0.05).tflops
print(once(), flush=True)
sys.stdin.readline()
print(once(), flush=True)
"""


def test_a_device_held_back_most_of_the_time_measures_slow(repo_root: Path) -> None:
    """One process measures twice: free, then stopped (SIGSTOP) and continued 90 % of each
    0.1 s, as a GPU held back: the held figure is well below the free one, whichever warm-up
    call a pause fell on (a run sized from a paused warm-up call measured one matmul between
    pauses, and the held device came out healthy: CI, 2026-12-07)."""
    env = dict(os.environ, PYTHONPATH=str(repo_root / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        free = float(proc.stdout.readline())
        proc.stdin.write("go\n")
        proc.stdin.flush()
        stopped = 0
        while proc.poll() is None and stopped < 600:  # at most 60 s of holding
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(0.09)
            os.kill(proc.pid, signal.SIGCONT)
            stopped += 1
            time.sleep(0.01)
            if select.select([proc.stdout], [], [], 0)[0]:
                break
        held = float(proc.stdout.readline())
    finally:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=10)
    assert stopped > 3, f"the measurement ended before it was held ({stopped} pauses)"
    assert 0 < held < 0.5 * free, f"free {free} TFLOP/s, held 90 % of the time {held}"
