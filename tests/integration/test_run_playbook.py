"""make run's playbook (playbooks/run.yml) on this machine: two "nodes" over the local
connection (127.0.0.1 and 127.0.0.2, 2 gloo ranks each) run tests/fixtures/run/plain_ddp.py,
a DDP script that imports nothing from gpufleet; then the same script failing on one rank."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from local_nodes import run_playbook, write_inventory

pytestmark = [pytest.mark.slow, pytest.mark.ansible]


def _run(repo: Path, tmp: Path, args: str) -> tuple[int, str, Path]:
    script = repo / "tests" / "fixtures" / "run" / "plain_ddp.py"
    assert "gpufleet" not in script.read_text().split('"""', 2)[2]
    rc, out = run_playbook(
        "run.yml",
        write_inventory(tmp),
        "-e",
        "verify_run_id=r1",
        "-e",
        f"verify_script={script}",
        "-e",
        f"verify_script_args='{args}'",
        "-e",
        "verify_script_timeout=120",
    )
    return rc, out, tmp / "rep" / "r1"


def _no_rank_left(out_dir: Path) -> None:
    for pidfile in out_dir.glob("*/run.pid"):
        pgid = int(pidfile.read_text())
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)


def test_plain_ddp_script_runs_on_both_nodes(repo_root: Path, tmp_path: Path) -> None:
    rc, out, run = _run(repo_root, tmp_path, "--steps 15")
    assert rc == 0, out[-5000:]
    assert "make run passed on 2 node(s)" in out
    logs = sorted(p.relative_to(run).as_posix() for p in run.glob("*/run-rank*.log"))
    assert logs == ["n1/run-rank0.log", "n1/run-rank1.log", "n2/run-rank2.log", "n2/run-rank3.log"]
    for rank, log in enumerate(sorted(run.glob("*/run-rank*.log"))):
        text = log.read_text()
        assert f"plain_ddp rank {rank}/4 on" in text, text
        assert "identical on all ranks: True" in text
    assert (run / "n1" / "run.log").is_file()
    _no_rank_left(tmp_path / "work" / "r1")


def test_failed_rank_is_named_with_its_node(repo_root: Path, tmp_path: Path) -> None:
    rc, out, run = _run(repo_root, tmp_path, "--fail-rank 3")
    assert rc != 0
    assert "make run failed (plain_ddp.py, run r1)" in out
    said = " ".join(out.split())
    # the node, the rank, and the rank's own error line (from its stderr copy run-rank1.stderr.log)
    assert "n2: rank 3 (local rank 1) exited with 1" in said, out[-4000:]
    assert "RuntimeError: rank 3 on" in said and "failing on purpose" in said, out[-4000:]
    assert "failing on purpose" in (run / "n2" / "run-rank3.log").read_text()
    _no_rank_left(tmp_path / "work" / "r1")
