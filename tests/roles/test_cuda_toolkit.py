"""The whole cuda_toolkit role on a Rocky-9-looking node with scripted dnf/rpm: installs the
plan's cuda-toolkit-X-Y through the CUDA repository tasks of nvidia_driver, links
/usr/local/cuda (redirected), writes the profile script, checks nvcc; a rerun changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.planning.planner import PlanRequest, make_plan
from roles_driver_helpers import FAKES, ansible_playbook, fake_pm, pkg, read_state, write_role_play

pytestmark = [pytest.mark.ansible, pytest.mark.slow]


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, Path]:
    """Scripted dnf/rpm offering cuda-toolkit-13-0 13.0.2: (bin directory, state file)."""
    return fake_pm(tmp_path, {"available": [pkg("cuda-toolkit-13-0", "13.0.2")]})


def _run(
    tmp: Path, key: tuple[Path, str], node: tuple[Path, Path], nvcc_release: str
) -> subprocess.CompletedProcess[str]:
    bindir, state = node
    prefix = tmp / "cuda-13.0"
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = prefix / "bin/nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc_release}, V0'\n")
    nvcc.chmod(0o755)
    plan = make_plan(PlanRequest(torch="2.13.0", os="rocky9", gpu_archs=("sm_80",))).to_dict()
    plan["toolkit_prefix"] = str(prefix)
    (tmp / "yum.repos.d").mkdir(exist_ok=True)
    role_vars: dict[str, Any] = {
        "gpufleet_plan": plan,
        "gpufleet_target": {"el_major": 9, "repo_arch": "x86_64"},
        "gpufleet_cuda_repo_gpgkey_url": key[0].as_uri(),
        "gpufleet_cuda_repo_gpgkey_fingerprint": key[1],
        "cuda_toolkit_install_retries": 1,
        "cuda_toolkit_install_delay": 0,
        "__nvidia_driver_yum_repos_dir": str(tmp / "yum.repos.d"),
        "__cuda_toolkit_link_path": str(tmp / "cuda"),
        "__cuda_toolkit_profile_path": str(tmp / "gpufleet-cuda.sh"),
    }
    facts = {
        "distribution": "Rocky",
        "distribution_major_version": "9",
        "distribution_version": "9.5",
        "architecture": "x86_64",
        "kernel": "5.14.0-503.el9.x86_64",
    }
    play = tmp / "play.yml"
    write_role_play(play, "cuda_toolkit", facts, role_vars, bindir, state)
    return ansible_playbook(
        play,
        env={"PATH": f"{bindir}:{os.environ['PATH']}", "ANSIBLE_LIBRARY": str(FAKES / "library")},
    )


def _changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", stdout)
    assert m, stdout[-5000:]
    return int(m.group(1))


def test_toolkit_role_installs_links_and_is_idempotent(
    tmp_path: Path, test_key: tuple[Path, str], node: tuple[Path, Path]
) -> None:
    state = node[1]
    first = _run(tmp_path, test_key, node, "13.0")
    assert first.returncode == 0, first.stdout[-5000:]
    assert _changed(first.stdout) >= 4  # key, repo file, package, link, profile
    assert [p["name"] for p in read_state(state)["installed"]] == ["cuda-toolkit-13-0"]
    assert os.readlink(tmp_path / "cuda") == str(tmp_path / "cuda-13.0")
    profile = (tmp_path / "gpufleet-cuda.sh").read_text(encoding="utf-8")
    assert f"{tmp_path}/cuda/lib64" in profile and f"{tmp_path}/cuda/bin" in profile
    assert (tmp_path / "yum.repos.d/cuda-rhel9.repo").exists()
    installs = [c for c in read_state(state)["calls"] if c[0] == "dnf" and "install" in c]
    assert installs == [["dnf", "-y", "install", "cuda-toolkit-13-0"]]  # never cuda-13-0

    second = _run(tmp_path, test_key, node, "13.0")
    assert second.returncode == 0, second.stdout[-5000:]
    assert _changed(second.stdout) == 0, second.stdout[-5000:]


def test_toolkit_role_fails_when_nvcc_is_another_release(
    tmp_path: Path, test_key: tuple[Path, str], node: tuple[Path, Path]
) -> None:
    res = _run(tmp_path, test_key, node, "12.8")
    assert res.returncode != 0
    assert "Check nvcc" in res.stdout
