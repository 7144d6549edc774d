"""Local "nodes" (127.0.0.1, 127.0.0.2 and optionally 127.0.0.3 over the local connection,
2 gloo ranks each)
for the whole-playbook tests of verify.yml and run.yml, run through playbook_runner; and one
verify worker under torchrun on this machine (:func:`torchrun_worker`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufleet.node.netprobe import free_port
from playbook_runner import REPO, ansible_env
from playbook_runner import run_playbook as _run_playbook

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
{n3}  vars:
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


N3 = """        n3:
          gpufleet_cluster_address: 127.0.0.3
          {extra}
"""


def write_inventory(tmp: Path, n2_extra: str = "", n3_extra: str | None = None) -> Path:
    """The local inventory above (a third node n3 when ``n3_extra`` is given), with fresh
    ports, under ``tmp``."""
    inv = tmp / "hosts.yml"
    inv.write_text(
        INVENTORY.format(
            n2_extra=n2_extra,
            n3="" if n3_extra is None else N3.format(extra=n3_extra),
            work=tmp / "work",
            reports=tmp / "rep",
            rdzv=free_port(),
            probe=free_port(),
        )
    )
    return inv


def run_playbook(playbook: str, inv: Path, *extra: str, timeout: int = 400) -> tuple[int, str]:
    """ansible-playbook playbooks/<playbook> -i inv <extra>: (exit code, output)."""
    proc = _run_playbook(
        REPO / "playbooks" / playbook, *extra, inventory=inv, env=ansible_env(), timeout=timeout
    )
    return proc.returncode, proc.stdout + proc.stderr


def torchrun_worker(repo: Path, module: str, result_json: Path, *args: str) -> dict[str, Any]:
    """One verify worker (``python -m <module>``) under torchrun on this machine: 2 gloo ranks,
    a static rendezvous on a free loopback port, one thread each; the run must exit 0. Returns
    the result file it wrote (``--result-json``), as read back."""
    env = dict(os.environ, PYTHONPATH=str(repo / "src"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
         "--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={free_port()}",
         "--max-restarts=0", "-m", module, "--timeout=30", "--result-node=n1",
         f"--result-json={result_json}", *args],
        capture_output=True, text=True, timeout=180, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(result_json.read_text())
    return data
