"""The HGX provisioning paths of the roles on a node that looks like Rocky 9 (facts from a
test module), with scripted dnf/rpm/systemctl/lspci on PATH (tests/fakes/fake_pm.py) and every
path redirected into a temporary directory. The testbed test
(tests/integration/test_testbed_hgx.py) runs the same roles against real dnf and systemd.

nvidia_driver: Fabric Manager joins the driver's transaction, is pinned to exactly the
installed driver's version (an older driver gets the older Fabric Manager), its unit is
enabled; a rerun runs no transaction; a branch change moves it in the one `dnf module
switch-to`; NVLink 5 adds nvlsm and ib_umad; a node without NVSwitch gets none of it.
preflight: NVSwitches from lspci, and the refusals of the repository probe.
infiniband, cluster_network, dcgm: packages, nvidia-peermem, NCCL_IB_HCA, DCGM."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.planning.planner import PlanRequest, make_plan
from roles_driver_helpers import (
    FAKES,
    ansible_playbook,
    fake_pm,
    pkg,
    read_state,
    write_results_task,
    write_role_play,
)
from roles_env_helpers import ib_tree

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

KERNEL = "5.14.0-503.el9.x86_64"
FACTS = {
    "distribution": "Rocky",
    "distribution_major_version": "9",
    "distribution_version": "9.5",
    "distribution_release": "Blue Onyx",
    "architecture": "x86_64",
    "kernel": KERNEL,
    "os_family": "RedHat",
}
H100_SWITCHES = ["0000:05:00.0", "0000:06:00.0"]
LSPCI_HGX = (
    "05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)\n"
    "06:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)\n"
)
LSPCI_PCIE = "3b:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 PCIe] [10de:20f1]\n"
PROFILES = {
    stream: {"default": ["nvidia-open"], "fm": ["nvidia-fabricmanager", "nvidia-open"]}
    for stream in ("580-open", "575-open")
}


def _driver(version: str, stream: str, fm: bool = True) -> list[dict[str, Any]]:
    def mod(name: str, epoch: int = 0) -> dict[str, Any]:
        return pkg(
            name, version, epoch=epoch, module="nvidia-driver", stream=stream, release="1.el9"
        )

    out = [
        {**mod("nvidia-open", epoch=3), "requires": ["nvidia-kmod-common"]},
        mod("nvidia-kmod-common", epoch=3),
    ]
    if fm:
        out.append(mod("nvidia-fabricmanager"))
    return out


def available(fm575: bool = True) -> list[dict[str, Any]]:
    base = [
        pkg(n, v)
        for n, v in [
            ("dkms", "3.1.8"),
            ("gcc", "11.5"),
            ("make", "4.3"),
            ("gcc-c++", "11.5"),
            ("kernel-headers", "5.14.0"),
            ("dnf-plugins-core", "4.3"),
            ("nvlsm", "2025.06.5"),
            ("rdma-core", "51.0"),
            ("libibverbs-utils", "51.0"),
            ("infiniband-diags", "51.0"),
            ("datacenter-gpu-manager-4-cuda13", "4.4.1"),
        ]
    ]
    base.append(pkg("kernel-devel-matched", "5.14.0", release="503.el9"))
    return (
        base
        + _driver("580.82.07", "580-open")
        + _driver("580.95.05", "580-open")
        + _driver("575.57.08", "575-open", fm=fm575)
    )


def modules(enabled: str | None = None) -> dict[str, Any]:
    return {
        "nvidia-driver": {
            "streams": ["580-open", "575-open", "open-dkms"],
            "default": "open-dkms",
            "enabled": enabled,
            "profiles": PROFILES,
        }
    }


def plan(archs: tuple[str, ...] = ("sm_90",), variant: str | None = None) -> dict[str, Any]:
    """The plan preflight would set; cu126 (driver >= 525.60.13) lets branch 575 be pinned."""
    req = PlanRequest(torch="2.13.0", os="rocky9", gpu_archs=archs, variant=variant)
    return make_plan(req).to_dict()


def bin_with(tmp: Path, state: dict[str, Any]) -> tuple[Path, Path]:
    tmp.mkdir(parents=True, exist_ok=True)
    bindir, path = fake_pm(tmp, state)
    link = bindir / "systemctl"
    if not link.exists():
        link.symlink_to(FAKES / "fake_pm.py")
    lspci = bindir / "lspci"
    if not lspci.exists():
        lspci.write_text('#!/bin/sh\ncat "$FAKE_LSPCI"\n')
        lspci.chmod(0o755)
    return bindir, path


def _env(bindir: Path, tmp: Path) -> dict[str, str]:
    (tmp / "units").mkdir(exist_ok=True)
    return {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "ANSIBLE_LIBRARY": str(FAKES / "library"),
    }


def run_role(
    tmp: Path, role: str, bindir: Path, state: Path, role_vars: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    (tmp / "units").mkdir(exist_ok=True)
    for d in ("yum.repos.d", "modprobe.d", "modules-load.d"):
        (tmp / d).mkdir(exist_ok=True)
    play = tmp / f"play-{role}.yml"
    write_role_play(play, role, FACTS, role_vars, bindir, state)
    doc = yaml.safe_load(play.read_text())
    doc[0]["environment"]["FAKE_UNIT_DIR"] = str(tmp / "units")
    play.write_text(yaml.safe_dump(doc, sort_keys=False))
    return ansible_playbook(play, env=_env(bindir, tmp), timeout=300)


def driver_vars(tmp: Path, key: tuple[Path, str], **extra: Any) -> dict[str, Any]:
    keyfile, fpr = key
    return {
        "gpufleet_plan": plan(),
        "gpufleet_has_gpu": False,
        "gpufleet_target": {"el_major": 9, "repo_arch": "x86_64"},
        "gpufleet_fabric": {"nvswitches": H100_SWITCHES},
        "gpufleet_cuda_repo_baseurl": "http://mirror.invalid/cuda/repos",
        "gpufleet_cuda_repo_gpgkey_url": keyfile.as_uri(),
        "gpufleet_cuda_repo_gpgkey_fingerprint": fpr,
        "nvidia_driver_manage_epel": False,
        "nvidia_driver_manage_crb": False,
        "nvidia_driver_install_retries": 1,
        "nvidia_driver_install_delay": 0,
        "__nvidia_driver_yum_repos_dir": str(tmp / "yum.repos.d"),
        "__nvidia_driver_modprobe_dir": str(tmp / "modprobe.d"),
        "__nvidia_driver_modules_load_dir": str(tmp / "modules-load.d"),
        "__nvidia_driver_unit_dirs": [str(tmp / "units")],
        "__nvidia_driver_initramfs_cmd": "true",
        **extra,
    }


def changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", stdout)
    assert m, stdout[-6000:]
    return int(m.group(1))


def transactions(state: Path) -> list[list[str]]:
    verbs = ("install", "remove", "upgrade", "enable", "switch-to", "reset")
    return [c for c in read_state(state)["calls"] if c[0] == "dnf" and any(v in c for v in verbs)]


def installed(state: Path) -> dict[str, str]:
    return {p["name"]: p["version"] for p in read_state(state)["installed"]}


def fm_unit(tmp: Path) -> None:
    (tmp / "units").mkdir(exist_ok=True)
    (tmp / "units" / "nvidia-fabricmanager.service").write_text("[Service]\n")


def test_fabric_manager_joins_the_driver_then_follows_a_branch_change(
    tmp_path: Path, test_key: tuple[Path, str]
) -> None:
    bindir, state = bin_with(tmp_path, {"available": available(), "modules": modules()})
    fm_unit(tmp_path)
    cu126 = {"gpufleet_plan": plan(variant="cu126")}
    first = run_role(
        tmp_path, "nvidia_driver", bindir, state, driver_vars(tmp_path, test_key, **cu126)
    )
    assert first.returncode == 0, first.stdout[-6000:]
    have = installed(state)
    assert have["nvidia-kmod-common"] == "580.95.05"
    assert have["nvidia-fabricmanager"] == have["nvidia-kmod-common"]
    tx = transactions(state)
    driver_tx = [c for c in tx if "nvidia-open" in c]
    assert driver_tx and "nvidia-fabricmanager" in driver_tx[0], tx  # one transaction
    assert read_state(state)["units"]["nvidia-fabricmanager"]["enabled"] is True
    assert "nvlsm" not in have  # H100: NVLink 4
    assert not (tmp_path / "modules-load.d" / "gpufleet-ib_umad.conf").exists()

    n = len(transactions(state))
    again = run_role(
        tmp_path, "nvidia_driver", bindir, state, driver_vars(tmp_path, test_key, **cu126)
    )
    assert again.returncode == 0, again.stdout[-6000:]
    assert changed(again.stdout) == 0, again.stdout[-6000:]
    assert len(transactions(state)) == n

    switch = run_role(
        tmp_path,
        "nvidia_driver",
        bindir,
        state,
        driver_vars(tmp_path, test_key, nvidia_driver_branch="575", **cu126),
    )
    assert switch.returncode == 0, switch.stdout[-6000:]
    later = transactions(state)[n:]
    assert [c[-1] for c in later if "switch-to" in c] == ["nvidia-driver:575-open"]
    assert not [c for c in later if "install" in c], later  # the switch moved Fabric Manager
    have = installed(state)
    assert have["nvidia-fabricmanager"] == have["nvidia-kmod-common"] == "575.57.08"


def test_older_driver_gets_its_own_fabric_manager_and_nvlink5_gets_nvlsm(
    tmp_path: Path, test_key: tuple[Path, str]
) -> None:
    old = [
        p
        for p in available()
        if p["version"] == "580.82.07" and p["name"] != "nvidia-fabricmanager"
    ]
    bindir, state = bin_with(
        tmp_path, {"available": available(), "installed": old, "modules": modules("580-open")}
    )
    fm_unit(tmp_path)
    extra = {"gpufleet_plan": plan(("sm_100",))}
    res = run_role(
        tmp_path, "nvidia_driver", bindir, state, driver_vars(tmp_path, test_key, **extra)
    )
    assert res.returncode == 0, res.stdout[-6000:]
    have = installed(state)
    assert have["nvidia-kmod-common"] == "580.82.07"  # the installed driver is kept
    assert have["nvidia-fabricmanager"] == "580.82.07"  # not the branch's newest 580.95.05
    assert have["nvlsm"] == "2025.06.5"
    umad = (tmp_path / "modules-load.d" / "gpufleet-ib_umad.conf").read_text()
    assert "\nib_umad\n" in umad
    # one transaction, at the installed driver's version from the start (no downgrade after)
    fm_tx = [c for c in transactions(state) if any("fabricmanager" in a for a in c)]
    assert len(fm_tx) == 1 and "nvidia-fabricmanager-580.82.07" in fm_tx[0], fm_tx


def test_no_nvswitch_no_fabric_manager(tmp_path: Path, test_key: tuple[Path, str]) -> None:
    bindir, state = bin_with(tmp_path, {"available": available(), "modules": modules()})
    res = run_role(
        tmp_path,
        "nvidia_driver",
        bindir,
        state,
        driver_vars(tmp_path, test_key, gpufleet_fabric={"nvswitches": []}),
    )
    assert res.returncode == 0, res.stdout[-6000:]
    assert "nvidia-fabricmanager" not in installed(state)
    assert not [c for c in read_state(state)["calls"] if "info" in c]  # no profile query


# --------------------------------------------------------------------------- preflight

PREFLIGHT_CASES: dict[str, tuple[str, dict[str, Any], list[str] | None]] = {
    # id: (lspci listing, vars, words of the refusal; None = must pass)
    "h100_ok": (LSPCI_HGX, {}, None),
    "pcie_no_probe": (LSPCI_PCIE, {"gpufleet_cuda_repo_baseurl": "http://unreachable/x"}, None),
    "pinned_575_without_fm": (
        LSPCI_HGX,
        {"nvidia_driver_branch": "575", "gpufleet_cuda_variant": "cu126", "__no_fm575": True},
        [
            "[nvidia_driver_branch]",
            "nvidia-fabricmanager of exactly version 575.57.08",
            "nvidia-driver:575-open",
            "has none",
        ],
    ),
    "fm_never_accepts_575": (
        LSPCI_HGX,
        {
            "nvidia_driver_branch": "575",
            "gpufleet_cuda_variant": "cu126",
            "nvidia_driver_fabricmanager": "never",
            "__no_fm575": True,
        },
        None,
    ),
    "b200_without_nvlsm": (
        LSPCI_HGX,
        {"gpufleet_gpu_archs": ["sm_100"], "__no_nvlsm": True},
        ["[nvidia_driver_nvlsm]", "NVLink 5", "nvlsm"],
    ),
    "query_error_quoted": (
        LSPCI_HGX,
        {"gpufleet_cuda_repo_baseurl": "http://unreachable.example/cuda"},
        ["[gpufleet_cuda_repo_baseurl]", "failed", "Failed to download metadata"],
    ),
}


@pytest.fixture(scope="module")
def preflight_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("preflight-hgx")
    osr = tmp / "os-release"
    osr.write_text('NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.5"\n')
    kd = pkg("kernel-devel", "5.14.0", release="503.el9",
             provides=[f"kernel-devel-uname-r = {KERNEL}"])  # fmt: skip
    tasks: list[dict[str, Any]] = [{"name": "start", "ansible.builtin.set_fact": {"r": {}}}]
    for cid, (listing, case_vars, _) in PREFLIGHT_CASES.items():
        vars_ = dict(case_vars)
        no_nvlsm = vars_.pop("__no_nvlsm", False)
        fm575 = not vars_.pop("__no_fm575", False)
        avail = [p for p in available(fm575) if not (no_nvlsm and p["name"] == "nvlsm")] + [kd]
        bindir, state = bin_with(tmp / cid, {"available": avail, "modules": modules()})
        (tmp / cid / "lspci.txt").write_text(listing)
        tasks.append(
            {
                "name": f"case {cid}",
                "environment": {
                    "PATH": f"{bindir}:{os.environ['PATH']}",
                    "FAKE_PM_STATE": str(state),
                    "FAKE_LSPCI": str(tmp / cid / "lspci.txt"),
                },
                "block": [
                    {"name": f"{cid} facts", "gpufleet_test_facts": {"facts": FACTS}},
                    {
                        "name": f"{cid} role",
                        "ansible.builtin.include_role": {"name": "preflight"},
                        "vars": {
                            "python_bootstrap_os_release_file": str(osr),
                            "gpufleet_allow_no_gpu": True,
                            "preflight_env_free_mb": 0,
                            "preflight_toolkit_free_mb": 0,
                            **vars_,
                        },
                    },
                    {
                        "name": f"{cid} ok",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'" + cid + "': {'ok': gpufleet_fabric, "
                            "'calls': (lookup('file', '" + str(state) + "') | from_json).calls, "
                            "'repo_files': (lookup('file', '" + str(state) + "') | from_json)"
                            ".repo_files | default([])}}) }}"
                        },
                    },
                ],
                "rescue": [
                    {
                        "name": f"{cid} failed",
                        "ansible.builtin.set_fact": {
                            "r": "{{ r | combine({'" + cid + "': {'failed': "
                            "ansible_failed_result.msg | default('?') | string}}) }}"
                        },
                    }
                ],
            }
        )
    out = tmp / "outcomes.json"
    tasks.append(write_results_task(out, check_mode=False))
    play = tmp / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], sort_keys=False
        )
    )
    env = {"ANSIBLE_LIBRARY": str(FAKES / "library")}
    res = ansible_playbook(play, env=env, timeout=900)
    assert res.returncode == 0, res.stdout[-6000:]
    data: dict[str, Any] = json.loads(out.read_text())
    return data


@pytest.mark.parametrize("cid", list(PREFLIGHT_CASES))
def test_preflight_fabric_case(preflight_outcomes: dict[str, Any], cid: str) -> None:
    _, _, words = PREFLIGHT_CASES[cid]
    got = preflight_outcomes[cid]
    if words is None:
        assert "ok" in got, got
    else:
        assert "failed" in got, f"{cid}: accepted: {got}"
        for w in words:
            assert w in got["failed"], f"{cid}: {w!r} not in {got['failed']!r}"
        assert got["failed"].startswith("localhost: NVSwitch system: ")


def test_preflight_sets_the_fabric_fact(preflight_outcomes: dict[str, Any]) -> None:
    h100 = preflight_outcomes["h100_ok"]
    assert h100["ok"]["nvswitches"] == H100_SWITCHES
    assert h100["ok"]["fabricmanager"] is True and h100["ok"]["nvlsm"] is False
    # the probe used a repository id of its own, limited to it
    info = [c for c in h100["calls"] if c[:1] == ["dnf"] and "info" in c]
    assert info and all("--repo=gpufleet-cuda-probe" in c for c in info), info
    # the mirror reaches dnf as a private repository file (never on its command line)
    assert any(a.startswith("--setopt=reposdir=") for a in info[0]), info[0]
    files = h100["repo_files"]
    assert files and all(f["mode"] == "0o600" for f in files), files
    assert files[0]["text"].startswith(
        "[gpufleet-cuda-probe]\nname=gpufleet-cuda-probe\nbaseurl=http"
    )
    pcie = preflight_outcomes["pcie_no_probe"]
    assert pcie["ok"]["fabricmanager"] is False
    assert not [c for c in pcie["calls"] if "info" in c]  # an unreachable URL is never asked


# --------------------------------------------------------------------------- infiniband


def ib_vars(tmp: Path, root: Path, **extra: Any) -> dict[str, Any]:
    return {
        "gpufleet_plan": plan(),
        "infiniband_sysfs_root": str(root),
        "infiniband_install_retries": 1,
        "infiniband_install_delay": 0,
        "__infiniband_modules_load_dir": str(tmp / "modules-load.d"),
        "__infiniband_yum_repos_dir": str(tmp / "yum.repos.d"),
        **extra,
    }


def test_infiniband_installs_rdma_core_and_persists_peermem(tmp_path: Path) -> None:
    root = ib_tree(tmp_path / "sys-ib")
    bindir, state = bin_with(tmp_path, {"available": available(), "modules": modules()})
    first = run_role(tmp_path, "infiniband", bindir, state, ib_vars(tmp_path, root))
    assert first.returncode == 0, first.stdout[-6000:]
    assert {"rdma-core", "libibverbs-utils", "infiniband-diags"} <= set(installed(state))
    conf = (tmp_path / "modules-load.d" / "nvidia-peermem.conf").read_text()
    assert "\nnvidia-peermem\n" in conf
    again = run_role(tmp_path, "infiniband", bindir, state, ib_vars(tmp_path, root))
    assert changed(again.stdout) == 0, again.stdout[-6000:]


def test_infiniband_without_hca_does_nothing(tmp_path: Path) -> None:
    bindir, state = bin_with(tmp_path, {"available": available(), "modules": modules()})
    res = run_role(tmp_path, "infiniband", bindir, state, ib_vars(tmp_path, tmp_path / "none"))
    assert res.returncode == 0, res.stdout[-6000:]
    assert "rdma-core" not in installed(state)
    assert not (tmp_path / "modules-load.d" / "nvidia-peermem.conf").exists()
    assert changed(res.stdout) == 0


# --------------------------------------------------------------------------- dcgm


def test_dcgm_installs_the_cuda_major_package_and_enables_the_host_engine(
    tmp_path: Path, test_key: tuple[Path, str]
) -> None:
    keyfile, fpr = test_key
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "nvidia-dcgm.service").write_text("[Service]\n")
    bindir, state = bin_with(tmp_path, {"available": available(), "modules": modules()})
    role_vars = {
        "gpufleet_plan": plan(),
        "gpufleet_dcgm": True,
        "gpufleet_target": {"el_major": 9, "repo_arch": "x86_64"},
        "gpufleet_cuda_repo_baseurl": "http://mirror.invalid/cuda/repos",
        "gpufleet_cuda_repo_gpgkey_url": keyfile.as_uri(),
        "gpufleet_cuda_repo_gpgkey_fingerprint": fpr,
        "dcgm_install_retries": 1,
        "dcgm_install_delay": 0,
        "__dcgm_unit_dirs": [str(tmp_path / "units")],
        "__nvidia_driver_yum_repos_dir": str(tmp_path / "yum.repos.d"),
    }
    assert plan()["cuda"] == "13.0"
    first = run_role(tmp_path, "dcgm", bindir, state, role_vars)
    assert first.returncode == 0, first.stdout[-6000:]
    assert "datacenter-gpu-manager-4-cuda13" in installed(state)
    assert read_state(state)["units"]["nvidia-dcgm"]["enabled"] is True
    again = run_role(tmp_path, "dcgm", bindir, state, role_vars)
    assert changed(again.stdout) == 0, again.stdout[-6000:]
