"""End to end on the simulated cluster: `make demo` (testbed up, provision, verify), a second
`make provision` that must change nothing, then `make testbed-down`.

Needs root and the testbed tools (`make testbed-deps`); runs in `make e2e` and in CI. Phase
times are written to reports/e2e-timings.json (and printed with `-s`), never asserted;
docs/performance.md records them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config, nodes  # noqa: E402

pytestmark = [
    pytest.mark.testbed,
    pytest.mark.slow,
    # cold: debootstrap + mirror + 3 first provisions + verify + rerun; pyproject's 600 s
    # default is for ordinary tests
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (namespaces, mounts)"),
    pytest.mark.skipif(
        shutil.which("debootstrap") is None or shutil.which("rpmbuild") is None,
        reason="testbed tools missing; run `make testbed-deps`",
    ),
]

RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


TIMINGS: dict[str, float] = {}


def make(*args: str, timeout: float = 2400) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    took = time.monotonic() - start
    print(f"\n[e2e] make {' '.join(args)}: rc={proc.returncode} in {took:.0f} s")
    TIMINGS[" ".join(args)] = round(took, 1)
    out = REPO / "reports" / "e2e-timings.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(TIMINGS, indent=2) + "\n")
    return proc, took


def recap(output: str) -> dict[str, tuple[int, int, int, int]]:
    """Last PLAY RECAP of the output: host -> (ok, changed, unreachable, failed)."""
    last = output.rsplit("PLAY RECAP", 1)[-1]
    return {m[0]: (int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in RECAP.findall(last)}


def test_demo_provisions_verifies_and_reruns_without_change() -> None:
    n = 3
    demo, _ = make("demo", f"NODES={n}")
    out = demo.stdout + demo.stderr
    try:
        assert demo.returncode == 0, out[-8000:]
        summary = json.loads((REPO / "reports/latest/summary.json").read_text())
        assert summary["status"] == "pass"
        assert sorted(summary["nodes"]) == [f"node{i}" for i in range(1, n + 1)]
        # the cluster all-reduce ran across every node (gloo, CPU): world = nodes x ranks
        cluster = [r for r in summary["bandwidth"] if r["source"] == "allreduce"]
        assert cluster, "no cluster all-reduce rows in the report"
        for row in cluster:
            w = row["world_size"]
            assert w >= n and w % n == 0 and row["backend"] == "gloo" and row["wrong"] == 0
            assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (w - 1) / w, rel=1e-3)
        assert ">> report:" in out and ": pass" in out

        again, _ = make("provision", "INVENTORY=testbed/inventory")
        rerun = recap(again.stdout)
        assert again.returncode == 0, again.stdout[-8000:]
        assert sorted(rerun) == [f"node{i}" for i in range(1, n + 1)]
        for host, (_, changed, unreachable, failed) in rerun.items():
            assert (changed, unreachable, failed) == (0, 0, 0), f"{host}: {rerun[host]}"
    finally:
        down, _ = make("testbed-down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert nodes.our_netns() == []
    assert nodes.our_links() == []
    assert nodes.our_mounts(config.STATE_DIR) == []
