"""Helpers for the tests that run the torch_env / cluster_network roles on localhost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from playbook_runner import BIN, REPO, ansible_env, run_playbook

__all__ = ["BIN", "REPO", "ansible_env"]  # re-exported for the tests

PLAY = REPO / "tests" / "playbooks" / "roles_env.yml"

# A plan as preflight would set it (docs/architecture.md, "The plan").
PLAN: dict[str, Any] = {
    "torch": "2.13.0",
    "torch_minor": "2.13",
    "variant": "cu128",
    "variant_is_default": False,
    "variant_reason": "test plan",
    "index_url": "https://download.pytorch.org/whl/cu128",
    "requirement": "torch==2.13.0",
    "expected_build": "2.13.0+cu128",
    "cuda": "12.8",
    "python": "3.11",
    "python_min": "3.10",
    "python_max": "3.14",
    "os": "el9",
    "el_major": 9,
    "gpu_archs": ["sm_80"],
    "notes": [],
}


def write_inventory(path: Path, peers: dict[str, str] | None = None, **localhost: Any) -> Path:
    """Inventory: localhost (local connection) + optional peers (never contacted) in gpu_nodes."""
    hosts: dict[str, Any] = {
        "localhost": {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            **localhost,
        }
    }
    for name, address in (peers or {}).items():
        hosts[name] = {"gpufleet_cluster_address": address}
    path.write_text(json.dumps({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def run_roles(
    tmp_path: Path,
    roles: list[str],
    extra: dict[str, Any],
    inventory: Path | None = None,
    timeout: int = 300,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook tests/playbooks/roles_env.yml on localhost with extra vars."""
    inv = inventory or write_inventory(tmp_path / "inventory.json")
    varfile = tmp_path / f"vars-{len(list(tmp_path.glob('vars-*.json')))}.json"
    varfile.write_text(json.dumps({"roles_under_test": roles, **extra}))
    return run_playbook(
        PLAY,
        "--limit",
        "localhost",
        "-e",
        f"@{varfile}",
        inventory=inv,
        env=ansible_env(),
        timeout=timeout,
    )


def recap(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The PLAY RECAP counters of localhost."""
    for line in result.stdout.splitlines():
        if line.startswith("localhost") and "ok=" in line:
            return {k: int(v) for k, v in (p.split("=") for p in line.split(":", 1)[1].split())}
    raise AssertionError(f"no recap in output:\n{result.stdout}\n{result.stderr}")


def output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


#: A node's InfiniBand ports for ib_tree: two active InfiniBand ports, one without link
#: partner (Polling), one active RoCE (Ethernet) front-end port.
IB_PORTS = (
    ("mlx5_0", "4: ACTIVE", "5: LinkUp", "InfiniBand"),
    ("mlx5_1", "4: ACTIVE", "5: LinkUp", "InfiniBand"),
    ("mlx5_2", "1: DOWN", "2: Polling", "InfiniBand"),
    ("mlx5_3", "4: ACTIVE", "5: LinkUp", "Ethernet"),
)


def ib_tree(root: Path) -> Path:
    """A /sys/class/infiniband-like tree of IB_PORTS under ``root`` (idempotent)."""
    for hca, state, phys, layer in IB_PORTS:
        d = root / hca / "ports" / "1"
        d.mkdir(parents=True, exist_ok=True)
        for name, text in (
            ("state", state),
            ("phys_state", phys),
            ("link_layer", layer),
            ("rate", "400 Gb/sec (4X NDR)"),
        ):
            (d / name).write_text(text + "\n")
    return root
