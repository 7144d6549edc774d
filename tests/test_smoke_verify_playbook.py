"""playbooks/verify.yml end to end on this machine: two "nodes" over the local connection
(127.0.0.1 and 127.0.0.2, 2 gloo ranks each), so the cluster all-reduce really spans two
torchrun agents with a static rendezvous; then the same with one node broken."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ansible]

INVENTORY = """
all:
  children:
    gpu_nodes:
      hosts:
        n1:
          gpufleet_cluster_address: 127.0.0.1
        n2:
          gpufleet_cluster_address: 127.0.0.2
          {n2_extra}
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
    verify_python: "{{{{ ansible_playbook_python }}}}"
    verify_work_dir: {work}
    verify_report_dir: {reports}
    verify_cpu_nproc: 2
    verify_run_smoke: false
    gpufleet_require_gpu: false
    gpufleet_allow_no_gpu: true
    verify_sizes: 4K,256K
    verify_iters: 5
    verify_probe_retries: 1
    verify_probe_timeout: 1
    gpufleet_rdzv_port: {rdzv}
    verify_probe_port: {probe}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _play(repo: Path, tmp: Path, n2_extra: str = "") -> tuple[int, str, dict[str, Any], Path]:
    inv = tmp / "hosts.yml"
    inv.write_text(
        INVENTORY.format(
            n2_extra=n2_extra,
            work=tmp / "work",
            reports=tmp / "rep",
            rdzv=_free_port(),
            probe=_free_port(),
        )
    )
    ansible = Path(sys.executable).parent / "ansible-playbook"
    env = dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [
            str(ansible),
            str(repo / "playbooks" / "verify.yml"),
            "-i",
            str(inv),
            "-e",
            "verify_run_id=t1",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=repo,
        env=env,
        check=False,
    )
    run = tmp / "rep" / "t1"
    summary = (
        json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    )
    return proc.returncode, proc.stdout + proc.stderr, summary, run


def test_syntax_check(repo_root: Path) -> None:
    ansible = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(ansible), "--syntax-check", "playbooks/verify.yml", "-i", "inventory"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
        check=False,
        env=dict(os.environ, ANSIBLE_CONFIG=str(repo_root / "ansible.cfg")),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_two_nodes_all_reduce_and_report(repo_root: Path, tmp_path: Path) -> None:
    rc, out, summary, run = _play(repo_root, tmp_path)
    assert rc == 0, out[-5000:]
    assert summary["status"] == "pass"
    for name in ("summary.json", "summary.md", "bandwidth.png", "run.json"):
        assert (run / name).is_file(), name
    assert (run.parent / "latest").resolve() == run.resolve()
    for node in ("n1", "n2"):
        assert (run / node / "probe.json").is_file()
        assert (run / node / "allreduce.json").is_file()
    assert summary["busbw_factors"] == {"4": 1.5}
    rows = summary["bandwidth"]
    assert rows, "no bandwidth rows"
    for r in rows:
        assert r["world_size"] == 4
        assert r["busbw"] == pytest.approx(r["algbw"] * 1.5, rel=1e-3)  # 2(n-1)/n, n=4
    meta = json.loads((run / "n1" / "allreduce.json").read_text())["meta"]
    assert meta["nnodes"] == 2
    assert {x["rank"] for x in meta["ranks"]} == {0, 1, 2, 3}
    assert "PASS" in out


def test_broken_node_is_named_and_nothing_launches(repo_root: Path, tmp_path: Path) -> None:
    rc, out, summary, run = _play(
        repo_root, tmp_path, n2_extra="verify_python: /nonexistent/bin/python"
    )
    assert rc != 0
    assert summary["status"] == "fail"
    fails = {(f["node"], f["name"]) for f in summary["failures"]}
    assert ("n2", "ansible:node") in fails
    msg = next(f["message"] for f in summary["failures"] if f["name"] == "ansible:node")
    assert "/nonexistent/bin/python" in msg
    assert "Cluster all-reduce not launched: node(s) n2 failed" in out
    assert not (run / "n1" / "allreduce.json").exists()
