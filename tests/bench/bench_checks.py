"""Benchmark (not a test): wall time of the whole checks suite on the healthy 8-GPU recording.

    .venv/bin/python tests/bench/bench_checks.py [--runs 5]

Two figures: the recording as is (NVML + torch facts replayed), and the same recording
with its torch section removed so the run imports the real torch (what a node pays).
Budget: 10 s per run (issue 5). Results go to docs/performance.md, section "checks".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "fixtures" / "nvml" / "healthy-h100x8.json"
MANIFEST = REPO / "tests" / "fixtures" / "manifest-h100-cu128.json"
BUDGET_S = 10.0


def one_run(recording: Path, out: Path) -> tuple[float, float, int, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [
        sys.executable, "-m", "pytest", "-c", str(REPO / "checks" / "pytest.ini"),
        str(REPO / "checks"), "-q", "-p", "no:cacheprovider",
        f"--nvml-recording={recording}", f"--gpufleet-manifest={MANIFEST}",
        f"--junitxml={out / 'checks.xml'}", f"--gpufleet-json={out / 'checks.json'}",
    ]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    data = json.loads((out / "checks.json").read_text())
    return wall, float(data["duration_s"]), len(data["records"]), proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        no_torch = tmpdir / "healthy-real-torch.json"
        data = json.loads(RECORDING.read_text())
        data.pop("torch")
        no_torch.write_text(json.dumps(data))
        for label, rec in (("recorded torch", RECORDING), ("real torch import", no_torch)):
            walls, suites = [], []
            n = rc = 0
            for _ in range(args.runs):
                wall, suite, n, rc = one_run(rec, tmpdir)
                walls.append(wall)
                suites.append(suite)
            worst = max(worst, *walls)
            print(
                f"checks suite, healthy 8x H100 recording, {label}: {n} records, rc={rc}, "
                f"wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
                f"max {max(walls):.2f}) over {args.runs} runs; in-suite median "
                f"{statistics.median(suites):.2f} s"
            )
    verdict = "within" if worst < BUDGET_S else "OVER"
    print(f"worst run {worst:.2f} s: {verdict} the {BUDGET_S:.0f} s budget")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
