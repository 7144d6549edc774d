"""The whole nvidia_driver role (and cuda_toolkit's repository path) on a node that looks like
EL8 / EL9 (facts from a test module) with scripted dnf/rpm on PATH, a throw-away GPG key for
the repositories, and every path redirected into a temporary directory.

Checks: first run changes the node; a rerun changes nothing and runs no dnf transaction; a
flavour switch runs `dnf module switch-to ... --allowerasing` once; the repository files carry
gpgcheck=1; no dnf call ever disables GPG checks; a node without GPU is not rebooted."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet.planning.planner import PlanRequest, make_plan
from roles_driver_helpers import FAKES, ansible_playbook, fake_pm, pkg, read_state, write_role_play

KERNELS = {8: "4.18.0-553.el8_10.x86_64", 9: "5.14.0-503.el9.x86_64"}


def _available(el: int) -> list[dict[str, Any]]:
    rel = f"1.el{el}"
    kver = KERNELS[el]
    base_ver, krel = kver.rsplit(".", 1)[0].split("-", 1)
    out = [
        pkg(n, v, release=rel)
        for n, v in [
            ("dkms", "3.1.8"),
            ("gcc", "11.5"),
            ("make", "4.3"),
            ("gcc-c++", "11.5"),
            ("kernel-headers", base_ver),
            ("dnf-plugins-core", "4.3"),
        ]
    ]
    out.append(
        pkg("kernel-devel", base_ver, release=krel, provides=[f"kernel-devel-uname-r = {kver}"])
    )
    out.append(pkg("kernel-devel-matched", base_ver, release=krel))
    for stream, names in {
        "580-open": ["nvidia-open", "kmod-nvidia-open-dkms"],
        "580-dkms": ["cuda-drivers", "kmod-nvidia-latest-dkms"],
    }.items():
        for n in [*names, "nvidia-driver"]:
            out.append(
                pkg(n, "580.95.05", release=rel, epoch=3, module="nvidia-driver", stream=stream)
            )
    return out


def _run(
    tmp: Path,
    el: int,
    key: tuple[Path, str],
    bindir: Path,
    state: Path,
    extra: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    keyfile, fpr = key
    plan = make_plan(PlanRequest(torch="2.13.0", os=f"rocky{el}", gpu_archs=("sm_80",))).to_dict()
    role_vars = {
        "gpufleet_plan": plan,
        "gpufleet_has_gpu": False,
        "gpufleet_target": {"el_major": el, "repo_arch": "x86_64"},
        "gpufleet_cuda_repo_baseurl": "http://mirror.invalid/cuda/repos",
        "gpufleet_cuda_repo_gpgkey_url": keyfile.as_uri(),
        "gpufleet_cuda_repo_gpgkey_fingerprint": fpr,
        "gpufleet_epel_baseurl": "http://mirror.invalid/epel",
        "gpufleet_epel_gpgkey_url": keyfile.as_uri(),
        "gpufleet_epel_gpgkey_fingerprint": fpr,
        "nvidia_driver_install_retries": 1,
        "nvidia_driver_install_delay": 0,
        "__nvidia_driver_yum_repos_dir": str(tmp / "yum.repos.d"),
        "__nvidia_driver_modprobe_dir": str(tmp / "modprobe.d"),
        "__nvidia_driver_initramfs_cmd": f"echo rebuilt >> {tmp}/initramfs.log",
        **(extra or {}),
    }
    facts = {
        "distribution": "Rocky",
        "distribution_major_version": str(el),
        "distribution_version": f"{el}.5",
        "distribution_release": "Blue Onyx",
        "architecture": "x86_64",
        "kernel": KERNELS[el],
        "os_family": "RedHat",
    }
    play = tmp / f"play-el{el}.yml"
    write_role_play(play, "nvidia_driver", facts, role_vars, bindir, state)
    (tmp / "yum.repos.d").mkdir(exist_ok=True)
    (tmp / "modprobe.d").mkdir(exist_ok=True)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "ANSIBLE_LIBRARY": str(FAKES / "library")}
    return ansible_playbook(play, env=env)


def _changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", stdout)
    assert m, stdout[-5000:]
    return int(m.group(1))


def _transactions(state: Path) -> list[list[str]]:
    verbs = ("install", "remove", "upgrade", "enable", "switch-to", "reset", "config-manager")
    return [c for c in read_state(state)["calls"] if c[0] == "dnf" and any(v in c for v in verbs)]


@pytest.mark.ansible
@pytest.mark.slow
@pytest.mark.parametrize(("el", "switch"), [(8, False), (9, True)])
def test_driver_role_installs_then_is_idempotent_then_switches_flavour(
    tmp_path: Path, el: int, switch: bool, test_key: tuple[Path, str]
) -> None:
    bindir, state = fake_pm(
        tmp_path,
        {
            "available": _available(el),
            "modules": {
                "nvidia-driver": {
                    "streams": ["580-dkms", "580-open", "open-dkms"],
                    "default": "open-dkms",
                    "enabled": None,
                }
            },
            "repos": {"baseos": True, "powertools" if el == 8 else "crb": False},
        },
    )

    first = _run(tmp_path, el, test_key, bindir, state)
    assert first.returncode == 0, first.stdout[-6000:]
    assert _changed(first.stdout) > 0
    s = read_state(state)
    names = {p["name"] for p in s["installed"]}
    # (the fake resolves no dependencies: only what the role asked for appears)
    assert {"nvidia-open", "dkms", "gcc", "make", "gcc-c++", "kernel-headers"} <= names
    kdev = "kernel-devel" if el == 8 else "kernel-devel-matched"
    assert kdev in names
    assert s["modules"]["nvidia-driver"]["enabled"] == "580-open"
    assert s["repos"]["powertools" if el == 8 else "crb"] is True
    assert len(s["keys"]) == 1  # same key for CUDA and EPEL here: imported once
    repo = (tmp_path / f"yum.repos.d/cuda-rhel{el}.repo").read_text(encoding="utf-8")
    assert (
        "gpgcheck=1" in repo and f"baseurl=http://mirror.invalid/cuda/repos/rhel{el}/x86_64" in repo
    )
    epel = (tmp_path / "yum.repos.d/gpufleet-epel.repo").read_text(encoding="utf-8")
    assert "gpgcheck = 1" in epel and "baseurl = http://mirror.invalid/epel" in epel
    assert (tmp_path / "modprobe.d/gpufleet-nouveau.conf").exists()
    assert (tmp_path / "initramfs.log").read_text(encoding="utf-8") == "rebuilt\n"
    if el == 8:
        assert any(f"kernel-devel-{KERNELS[8]}" in c for c in _transactions(state))
    n_tx = len(_transactions(state))

    second = _run(tmp_path, el, test_key, bindir, state)
    assert second.returncode == 0, second.stdout[-6000:]
    assert _changed(second.stdout) == 0, second.stdout[-6000:]
    assert len(_transactions(state)) == n_tx  # no dnf transaction on the rerun
    assert (tmp_path / "initramfs.log").read_text(encoding="utf-8") == "rebuilt\n"

    if not switch:  # each run takes a while; the switch is exercised once (EL9)
        return
    third = _run(tmp_path, el, test_key, bindir, state, {"nvidia_driver_flavor": "proprietary"})
    assert third.returncode == 0, third.stdout[-6000:]
    switches = [c for c in _transactions(state) if "switch-to" in c]
    assert len(switches) == 1 and "--allowerasing" in switches[0]
    assert switches[0][-1] == "nvidia-driver:580-dkms"
    names = {p["name"] for p in read_state(state)["installed"]}
    assert "cuda-drivers" in names and "nvidia-open" not in names  # erased by the switch

    calls = read_state(state)["calls"]
    assert not [c for c in calls if any("nogpgcheck" in a or "gpgcheck=0" in a for a in c)]


@pytest.mark.ansible
@pytest.mark.slow
def test_wrong_key_fingerprint_is_refused(tmp_path: Path, test_key: tuple[Path, str]) -> None:
    bindir, state = fake_pm(
        tmp_path, {"available": _available(9), "modules": {}, "repos": {"crb": True}}
    )
    res = _run(
        tmp_path,
        9,
        test_key,
        bindir,
        state,
        {
            "gpufleet_cuda_repo_gpgkey_fingerprint": "610C7B14E068A878070DA4E99CD0A493D42D0685",
            "nvidia_driver_manage_epel": False,
            "nvidia_driver_manage_crb": False,
        },
    )
    assert res.returncode != 0
    assert "does not match any key fingerprints" in res.stdout
    assert read_state(state).get("keys", []) == []
    assert not (tmp_path / "yum.repos.d/cuda-rhel9.repo").exists()
