"""gpufleet.provisioning.preflight_probe's node step (action gpufleet.core.preflight): the probe script run for
real with bash on this machine (fake lspci/rpm/dnf on PATH), what observe() reads from its
output, and judge()'s decisions. The whole role on a Rocky-9-looking node:
tests/roles/test_preflight.py and tests/roles/test_hgx_roles.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpufleet.planning import osinfo
from gpufleet.provisioning import preflight_probe as preflight

H100 = (
    "17:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)"
)
NVSWITCH = "05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)"


def _fake(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    p.chmod(0o755)


def _run(tmp: Path, argv: list[str], **fakes: str) -> subprocess.CompletedProcess[str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in fakes.items():
        _fake(bindir, name, body)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30, check=False)


def test_the_probe_script_sees_gpus_space_and_installed_builds(tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin/python").write_text("#!/bin/sh\n", encoding="utf-8")
    (env / "bin/python").chmod(0o755)
    (env / "lib/python3.11/site-packages/torch-2.13.0+cu130.dist-info").mkdir(parents=True)
    disks = [{"path": str(tmp_path / "not/yet/there"), "required_mb": 1, "variable": "v1"}]
    argv = preflight.probe_argv("5.14.0-1.el9.x86_64", True, "", str(env), disks)
    r = _run(
        tmp_path,
        argv,
        lspci=f"printf '%s\\n' '{H100}' '{NVSWITCH}'",
        rpm='case "$*" in *cuda-toolkit*) echo cuda-toolkit-13-0-13.0.2-1.x86_64;; '
        "*) exit 1;; esac",
        dnf='echo "Error: Failed to download metadata for repo" >&2; exit 1',
        mokutil="echo SecureBoot enabled",
    )
    assert r.returncode == 0, r.stderr
    seen = preflight.observe(r.stdout, disks)
    assert [g["pci"] for g in seen["gpus"]] == ["17:00.0"]
    assert seen["gpus"][0]["arch"] == "sm_90"
    assert seen["nvswitches"] == ["0000:05:00.0"]
    assert seen["kernel_devel"] == "error"
    assert "Failed to download metadata" in seen["kernel_devel_detail"]
    assert seen["secure_boot"] == "enabled"
    assert seen["installed_torch"] == ["torch-2.13.0+cu130.dist-info"]
    assert seen["installed_toolkits"] == ["cuda-toolkit-13-0"]
    (row,) = seen["disks"]
    assert row["variable"] == "v1" and isinstance(row["free_mb"], int)


def test_a_failing_pci_listing_fails_the_probe(tmp_path: Path) -> None:
    r = _run(tmp_path, preflight.probe_argv("k", False, "", "/nonexistent", []), lspci="exit 3")
    assert r.returncode == 1
    assert "lspci -nn -d 10de: failed" in r.stderr
    assert "kernel-devel" not in preflight.probe_sections(r.stdout)


def test_inventory_values_are_parameters_not_script_text() -> None:
    evil = "/opt/env'; touch /tmp/pwned; '"
    argv = preflight.probe_argv("k", True, "http://m/x y", evil, [{"path": evil, "variable": "v"}])
    assert argv[:2] == ["bash", "-c"] and evil not in argv[2]
    assert argv[3:] == ["gpufleet-probe", "k", "1", "--repofrompath=gpufleet-base-probe,http://m/x y",
                        evil, "v", evil]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("SecureBoot enabled\n", "enabled"),
        ("SecureBoot disabled", "disabled"),
        ("EFI variables are not supported on this system", "unsupported"),
        ("no-efi", "unsupported"),
        ("efi-without-mokutil", "unknown"),
    ],
)
def test_secure_boot_states(text: str, state: str) -> None:
    assert preflight.secure_boot_state(text) == state


def _inputs(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "target": osinfo.el_target("Rocky", 9, "x86_64", "Blue Onyx"),
        "torch": "2.13.0",
        "variant": "",
        "python": "3.11",
        "gpu_archs": [],
        "plan_installed_driver": "auto",
        "allow_no_gpu": False,
        "kernel": "5.14.0-503.el9.x86_64",
        "driver_install": True,
        "packaging": "dkms",
        "fabricmanager": "auto",
        "nvlsm": "auto",
    }
    return {**base, **kw}


def _seen(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "gpus": [],
        "nvswitches": [],
        "driver": "",
        "kernel_devel": "installed",
        "kernel_devel_detail": "",
        "secure_boot": "disabled",
        "disks": [],
        "installed_torch": [],
        "installed_toolkits": [],
    }
    return {**base, **kw}


def test_judge_plans_from_the_gpus_on_the_bus(tmp_path: Path) -> None:
    gpus = preflight.observe(f"@@gpufleet-probe lspci\n{H100}\n", [])["gpus"]
    v = preflight.judge("n1", _inputs(), _seen(gpus=gpus))
    assert v["problems"] == []
    assert v["answer"]["refused"] is None and v["answer"]["plan"]["gpu_archs"] == ["sm_90"]
    assert v["choice"]["branch"]
    assert v["fabric"]["fabricmanager"] is False


def test_judge_names_each_problem_with_the_node() -> None:
    disks = [{"path": "/opt", "required_mb": 10, "free_mb": 5, "variable": "preflight_env_free_mb"}]
    v = preflight.judge(
        "n7",
        _inputs(gpu_archs=["sm_60"], flavor="open"),
        _seen(kernel_devel="missing", secure_boot="enabled", disks=disks),
    )
    joined = "\n".join(v["problems"])
    assert all(p.startswith("n7: ") for p in v["problems"])
    for word in (
        "[nvidia_driver_flavor]",
        "kernel-devel",
        "[preflight_secure_boot_ok]",
        "MiB free",
    ):
        assert word in joined


def test_free_space_is_not_needed_for_what_is_installed() -> None:
    disks = [
        {"path": "/opt", "required_mb": 10, "free_mb": 5, "variable": "preflight_env_free_mb"},
        {"path": "/usr", "required_mb": 10, "free_mb": 5, "variable": "preflight_toolkit_free_mb"},
    ]
    plain = preflight.judge("n", _inputs(allow_no_gpu=True), _seen(disks=disks))
    assert len(plain["problems"]) == 2
    build = plain["answer"]["plan"]["expected_build"]
    toolkit = plain["answer"]["plan"]["toolkit_package"]
    done = preflight.judge(
        "n",
        _inputs(allow_no_gpu=True),
        _seen(disks=disks, installed_torch=[f"torch-{build}.dist-info"],
              installed_toolkits=[toolkit]),
    )  # fmt: skip
    assert done["problems"] == []


def test_a_planner_refusal_is_a_problem_not_an_error() -> None:
    v = preflight.judge(
        "n", _inputs(torch="2.15.0", gpu_archs=["sm_60"], allow_no_gpu=True), _seen()
    )
    assert v["answer"]["plan"] is None and v["answer"]["refused"]
    assert any("the planner refused this node" in p for p in v["problems"])
    assert v["choice"] == {}


def test_the_installed_driver_is_planned_against_only_when_asked() -> None:
    seen = _seen(driver="470.256.02")
    kept = preflight.judge("n", _inputs(gpu_archs=["sm_90"], driver_install=False), seen)
    assert kept["answer"]["plan"] is None  # 470 is too old for any CUDA 13 wheel
    replaced = preflight.judge("n", _inputs(gpu_archs=["sm_90"]), seen)
    assert replaced["answer"]["plan"] is not None


def test_fabricmanager_query_quotes_every_value() -> None:
    s9 = preflight.fabricmanager_probe_script(9, "http://r/x'y", "580-open", [], ["nvlsm"])
    assert "module info --profile nvidia-driver:580-open" in s9
    assert "'http://r/x'\"'\"'y'" in s9 and "repoquery --qf '%{name} %{version}' nvlsm" in s9
    s10 = preflight.fabricmanager_probe_script(10, "http://r", "", ["nvidia-fabricmanager"], [])
    assert "module info" not in s10
    assert "repoquery --qf '%{name} %{version}' nvidia-kmod-common nvidia-fabricmanager" in s10
