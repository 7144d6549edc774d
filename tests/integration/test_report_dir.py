"""make verify's report folder (REPORT_DIR, gpufleet verify --report-dir) and the role's
verify_report_dir must name one folder: gpufleet verify keeps the run's lock and run id there
and reads the verdict there. A verify_report_dir set to another folder in the inventory or on
the command line is refused before any change (before: the report went there, and make verify
said "no report", exit 1, after a whole run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.verify.verify_run import REPORT_DIR_VAR
from local_nodes import run_playbook, write_inventory
from playbook_runner import REPO, ansible_env

pytestmark = [pytest.mark.ansible, pytest.mark.slow]


def test_a_verify_report_dir_elsewhere_is_refused_before_any_change(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path)  # verify_report_dir: <tmp>/rep
    env = {**ansible_env(), "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "gpufleet", "verify", "--repo", str(REPO), "--inventory", str(inv),
         "--run-id", "rd-1", "--report-dir", str(tmp_path / "site")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 2, out[-3000:]
    assert f"n1: verify_report_dir={tmp_path / 'rep'} is refused -> allowed: " in out, out[-3000:]
    assert f"REPORT_DIR={tmp_path / 'rep'} (make verify)" in out
    assert "refused before any change" in out and "PLAY [Verify the GPU nodes]" not in out
    assert not (tmp_path / "site" / "rd-1").exists() and not (tmp_path / "work").exists()


def test_the_same_folder_written_two_ways_passes_the_check(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path)
    same = json.dumps({REPORT_DIR_VAR: f"{tmp_path}/x/../rep/", "gpufleet_check_roles": ["verify"]})
    rc, out = run_playbook("check_inventory.yml", inv, "-e", same)
    assert rc == 0, out[-3000:]
    assert "is refused" not in out
