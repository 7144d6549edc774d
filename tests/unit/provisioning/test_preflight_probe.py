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


def _run(
    tmp: Path, argv: list[str], stdin: str | None = None, **fakes: str
) -> subprocess.CompletedProcess[str]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in fakes.items():
        _fake(bindir, name, body)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    return subprocess.run(
        argv, input=stdin, capture_output=True, text=True, env=env, timeout=30, check=False
    )


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
    url = "http://u:s3cret@m/x y"
    argv = preflight.probe_argv("k", True, url, evil, [{"path": evil, "variable": "v"}])
    assert argv[:2] == ["bash", "-c"] and evil not in argv[2]
    assert argv[3:] == ["gpufleet-probe", "k", "1", "gpufleet-base-probe", evil, "v", evil]
    assert "s3cret" not in " ".join(argv), "a mirror's URL never goes on the command line"


def test_the_base_mirror_reaches_dnf_as_a_private_repository_file(tmp_path: Path) -> None:
    """The mirror URL's credentials come on stdin and reach dnf as username=/password= in a
    0600 file beside the system's repositories; the file is gone after the probe."""
    url = "https://site%40corp:s3cr%3At@mirror.lan/base/9"
    argv = preflight.probe_argv("k9", True, url, "/nonexistent", [])
    seen = tmp_path / "dnf-saw"
    dnf = (
        f'for a in "$@"; do case "$a" in --setopt=reposdir=*) d=${{a##*,}};; esac; done; '
        f'{{ echo "$@"; stat -c %a "$d"/gpufleet-base-probe.repo; cat "$d"/gpufleet-base-probe.repo; '
        f"echo DIR=$d; }} > {seen}; echo kernel-devel-k9"
    )
    r = _run(
        tmp_path, argv, stdin=preflight.probe_repo_file(preflight.BASE_PROBE_REPO, url),
        lspci="true", rpm="exit 1", dnf=dnf,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert preflight.observe(r.stdout, [])["kernel_devel"] == "available"
    text = seen.read_text()
    assert "--setopt=reposdir=/etc/yum.repos.d,/etc/yum/repos.d,/etc/distro.repos.d," in text
    assert "\n600\n" in text
    assert "baseurl=https://mirror.lan/base/9" in text
    assert "username=site@corp" in text and "password=s3cr:t" in text
    assert not Path(text.split("DIR=")[1].strip()).exists(), "the probe removes its repo file"


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
    s9 = preflight.fabricmanager_probe_script(9, "580-open", [], ["nvlsm"])
    assert "module info --profile nvidia-driver:580-open" in s9
    assert "repoquery --qf '%{name} %{version}' nvlsm" in s9
    assert '--setopt=reposdir="$repodir" --repo=gpufleet-cuda-probe' in s9
    s10 = preflight.fabricmanager_probe_script(10, "", ["nvidia-fabricmanager"], [])
    assert "module info" not in s10
    assert "repoquery --qf '%{name} %{version}' nvidia-kmod-common nvidia-fabricmanager" in s10


def test_a_build_the_configured_source_cannot_serve_is_a_problem_of_the_node() -> None:
    """cu126 from a PyPI mirror, which carries torch 2.13.0's cu130 build only: refused here,
    before nvidia_driver runs; the cu130 plan from the same mirror is served."""
    source = {"index_url": "https://u:pw@nexus.example/repository/pypi-all/simple"}
    v = preflight.judge(
        "n3", _inputs(variant="cu126", allow_no_gpu=True, torch_source=source), _seen()
    )
    joined = "\n".join(v["problems"])
    assert v["torch_step"] is None
    assert joined.startswith("n3: torch_env cannot install the planned torch build:")
    assert "gpufleet_pip_index_url='https://***@nexus.example/repository/pypi-all/simple'" in joined
    assert "pw" not in joined
    served = preflight.judge("n3", _inputs(allow_no_gpu=True, torch_source=source), _seen())
    assert served["problems"] == []
    assert served["torch_step"]["requirement"] == "torch===2.13.0"


def test_a_lock_of_another_build_is_a_problem_of_the_node() -> None:
    from gpufleet.planning import torch_lock as TL

    pin = TL.wheel_pin("torch-2.13.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl", "a" * 64)
    text = TL.render(
        {"torch": "2.13.0", "variant": "cu126", "cuda": "12.6", "python": "3.11"}, [pin]
    )
    v = preflight.judge(
        "n4",
        _inputs(allow_no_gpu=True, torch_lock="site.lock", torch_lock_text=text),
        _seen(),
    )
    joined = "\n".join(v["problems"])
    assert (
        "gpufleet_torch_lock site.lock was made for variant 'cu126', the plan needs 'cu130'"
        in joined
    )
    assert "gpufleet_torch_lock site.lock pins torch 2.13.0+cu126" in joined


def test_free_space_counts_a_pypi_build_as_installed() -> None:
    disks = [{"path": "/opt", "required_mb": 10, "free_mb": 5, "variable": "preflight_env_free_mb"}]
    source = {"source": "pypi"}
    done = preflight.judge(
        "n", _inputs(allow_no_gpu=True, torch_source=source),
        _seen(disks=disks, installed_torch=["torch-2.13.0.dist-info"]),
    )  # fmt: skip
    assert done["problems"] == []
    other = preflight.judge(
        "n", _inputs(allow_no_gpu=True, torch_source=source),
        _seen(disks=disks, installed_torch=["torch-2.13.0+cpu.dist-info"]),
    )  # fmt: skip
    assert any("MiB free" in p for p in other["problems"])
