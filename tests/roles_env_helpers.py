"""Helpers for the tests that run the torch_env / cluster_network roles on localhost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
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


def ansible_env() -> dict[str, str]:
    """The environment of an ansible run: repo config, no colour, no inherited pip config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "ANSIBLE_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
    return env


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
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(inv),
            "--limit",
            "localhost",
            str(PLAY),
            "-e",
            f"@{varfile}",
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def recap(result: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The PLAY RECAP counters of localhost."""
    for line in result.stdout.splitlines():
        if line.startswith("localhost") and "ok=" in line:
            return {k: int(v) for k, v in (p.split("=") for p in line.split(":", 1)[1].split())}
    raise AssertionError(f"no recap in output:\n{result.stdout}\n{result.stderr}")


def output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr
