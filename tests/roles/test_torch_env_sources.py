"""torch_env's torch step from each kind of source, for real on localhost (venv, real pip,
stand-in torch wheels of tests/fake_wheels.py served by file:// indexes; no network):

- a PyPI-layout mirror serves the plan's PyPI default build unlabelled (torch===2.13.0);
  the env converges (rerun changed=0) although its metadata version has no label;
- a build such a mirror cannot serve is refused before any change, naming the variables;
- a find-links wheelhouse with no index, refused while it holds no torch of the build;
- a hash lock written by `gpufleet lock`: installed with --require-hashes; a tampered wheel
  is refused with nothing installed; a lock of another build is refused before any change.

The real CUDA wheel from a PyPI-layout mirror on simulated EL nodes: docs/testbed.md,
"A real CUDA wheel" (make demo TORCH_WHEELS=cuda)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_wheels import build, plain, simple_index, torch_build
from gpufleet.planning.planner import PlanRequest, make_plan
from roles_env_helpers import BIN, output, recap, run_roles
from torch_env_workspace import BASE_PYTHON, workspace_dir

pytestmark = [pytest.mark.slow, pytest.mark.ansible]

PLAN = make_plan(PlanRequest(torch="2.13.0", python="3.11")).to_dict()  # cu130, PyPI default


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    yield from workspace_dir("gpufleet-sources-", "runs the role as root")


@pytest.fixture(scope="module")
def mirrors(workspace: Path) -> dict[str, Path]:
    """PyPI layout (unlabelled cu130 build), PyTorch layout for cu126 (labelled), and a
    wheelhouse directory (no index) with the cu130 build."""
    wheels = workspace / "wheels"
    nccl13 = build(plain("nvidia-nccl-cu13", "2.29.7"), wheels)
    nccl12 = build(plain("nvidia-nccl-cu12", "2.29.3"), wheels)
    helper = build(plain("gfhelper", "1.0"), wheels)
    pypi_torch = build(torch_build("2.13.0", "", "13.0", "nvidia-nccl-cu13==2.29.7"), wheels)
    cu126 = build(torch_build("2.13.0", "cu126", "12.6", "nvidia-nccl-cu12==2.29.3"), wheels)
    house = workspace / "house"
    house.mkdir()
    for w in (pypi_torch, nccl13, helper):
        (house / w.name).write_bytes(w.read_bytes())
    return {
        "pypi": simple_index(workspace / "pypi" / "simple", [pypi_torch, nccl13, helper]),
        "cu126": simple_index(workspace / "whl" / "cu126", [cu126, nccl12, helper]),
        "house": house,
        "empty_house": (workspace / "empty-house"),
    }


def env_vars(workspace: Path, env: str, **over: Any) -> dict[str, Any]:
    return {
        "gpufleet_plan": PLAN,
        "torch_env_manager": "venv",
        "torch_env_python": str(BASE_PYTHON),
        "torch_env_prefix": str(workspace / env),
        "torch_env_state_dir": str(workspace / f"{env}-state"),
        "torch_env_config_dir": str(workspace / f"{env}-etc"),
        "torch_env_owner": "root",
        "torch_env_group": "root",
        "torch_env_create_owner": False,
        "torch_env_packages": ["gfhelper==1.0"],
        "torch_env_install_gpufleet": False,
        **over,
    }


def reported(workspace: Path, env: str) -> dict[str, Any]:
    """What torch in the env reports after an import (as the checks read it)."""
    code = (
        "import json, torch; print(json.dumps({'version': torch.__version__, "
        "'cuda': torch.version.cuda, 'nccl': list(torch.cuda.nccl.version())}))"
    )
    done = subprocess.run(
        [str(workspace / env / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def installed(workspace: Path, env: str) -> list[str]:
    site = next((workspace / env / "lib").glob("python*/site-packages"))
    return sorted(p.name for p in site.glob("*.dist-info"))


def test_pypi_mirror_serves_the_default_build_unlabelled(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    index = f"file://{mirrors['pypi']}"
    result = run_roles(
        workspace, ["torch_env"], env_vars(workspace, "pypi", gpufleet_pip_index_url=index)
    )
    assert result.returncode == 0, output(result)[-5000:]
    assert "pin it can satisfy: torch===2.13.0" in output(result), "the unlabelled pin"
    assert reported(workspace, "pypi") == {
        "version": "2.13.0+cu130",
        "cuda": "13.0",
        "nccl": [2, 29, 7],
    }
    assert "torch-2.13.0.dist-info" in installed(workspace, "pypi")
    manifest = json.loads((workspace / "pypi-etc" / "manifest.json").read_text())
    assert (manifest["env_torch"], manifest["env_torch_cuda"], manifest["env_torch_nccl"]) == (
        "2.13.0+cu130",
        "13.0",
        "2.29.7",
    )
    assert manifest["env_torch_source"] == "pypi"
    # the rerun reads the same facts as the check after the install: nothing to do
    again = run_roles(
        workspace, ["torch_env"], env_vars(workspace, "pypi", gpufleet_pip_index_url=index)
    )
    assert again.returncode == 0, output(again)[-5000:]
    assert recap(again)["changed"] == 0, output(again)[-5000:]


def test_a_build_the_pypi_mirror_cannot_serve_is_refused_before_any_change(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    index = f"file://{mirrors['pypi']}"
    extra = env_vars(
        workspace, "refused", gpufleet_pip_index_url=index, torch_env_wheel_variant="cu126"
    )
    result = run_roles(workspace, ["torch_env"], extra)
    text = output(result)
    assert result.returncode != 0
    assert recap(result)["changed"] == 0
    assert not (workspace / "refused").exists()
    assert "torch_env_wheel_variant='cu126' cannot come from gpufleet_pip_index_url=" in text
    assert "PyPI carries one Linux build of torch 2.13.0, the cu130 build" in text
    assert "gpufleet_torch_source: pytorch-index" in text, "the first way out"
    assert "gpufleet_cuda_variant: cu130" in text, "the second way out"


def test_pytorch_layout_mirror_serves_a_labelled_build(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    """A mirror ending in the variant is taken for the PyTorch index's layout (auto)."""
    index = f"file://{mirrors['cu126']}"
    extra = env_vars(
        workspace, "cu126", gpufleet_pip_index_url=index, torch_env_wheel_variant="cu126"
    )
    result = run_roles(workspace, ["torch_env"], extra)
    assert result.returncode == 0, output(result)[-5000:]
    assert "pin it can satisfy: torch==2.13.0+cu126" in output(result)
    assert reported(workspace, "cu126") == {
        "version": "2.13.0+cu126",
        "cuda": "12.6",
        "nccl": [2, 29, 3],
    }


def test_wheelhouse_without_torch_is_refused_then_one_with_it_serves(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    mirrors["empty_house"].mkdir(exist_ok=True)
    common = {"gpufleet_torch_source": "wheelhouse", "gpufleet_pip_index_url": ""}
    bad = env_vars(
        workspace, "whenv", gpufleet_pip_find_links=[str(mirrors["empty_house"])], **common
    )
    result = run_roles(workspace, ["torch_env"], bad)
    assert result.returncode != 0
    text = output(result)
    assert "holds no torch 2.13.0 wheel of the cu130 build (torch wheels there: none)" in text
    assert "gpufleet_pip_find_links=" in text
    assert recap(result)["changed"] == 0
    assert not (workspace / "whenv").exists()
    good = env_vars(workspace, "whenv", gpufleet_pip_find_links=[str(mirrors["house"])], **common)
    result = run_roles(workspace, ["torch_env"], good)
    assert result.returncode == 0, output(result)[-5000:]
    assert reported(workspace, "whenv")["cuda"] == "13.0"
    conf = (workspace / "whenv-state" / "pip-torch.conf").read_text()
    assert "no-index = true" in conf and "index-url" not in conf


def _lock(workspace: Path, mirrors: dict[str, Path], name: str, *args: str) -> Path:
    out = workspace / name
    done = subprocess.run(
        [str(BIN / "gpufleet"), "lock", "--torch", "2.13.0", "--python", "3.11", "--output", str(out),
         "--platform", "any", *args],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_lock_installs_with_hashes_and_a_tampered_wheel_installs_nothing(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    index = f"file://{mirrors['pypi']}"
    lock = _lock(
        workspace, mirrors, "torch.lock", "--index-url", index, "--package", "gfhelper==1.0"
    )
    text = lock.read_text()
    assert text.count("--hash=sha256:") == 3 and "torch===2.13.0" in text
    extra = env_vars(
        workspace, "locked", gpufleet_pip_index_url=index, gpufleet_torch_lock=str(lock)
    )
    result = run_roles(workspace, ["torch_env"], extra)
    assert result.returncode == 0, output(result)[-5000:]
    assert "--require-hashes" in output(result)
    assert reported(workspace, "locked")["nccl"] == [2, 29, 7]
    again = run_roles(workspace, ["torch_env"], extra)
    assert recap(again)["changed"] == 0, output(again)[-5000:]

    # the mirror now serves other bytes for one wheel of the closure
    helper = next((mirrors["pypi"] / "files").glob("gfhelper-*.whl"))
    original = helper.read_bytes()
    build(plain("gfhelper", "1.0"), workspace / "tampered")
    helper.write_bytes((workspace / "tampered" / helper.name).read_bytes() + b"\0")
    try:
        fresh = env_vars(
            workspace, "tamper", gpufleet_pip_index_url=index, gpufleet_torch_lock=str(lock)
        )
        result = run_roles(workspace, ["torch_env"], fresh)
    finally:
        helper.write_bytes(original)
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in output(result)
    left = installed(workspace, "tamper")
    assert not [d for d in left if d.startswith(("torch-", "nvidia_nccl", "gfhelper"))], left


def test_lock_of_another_build_is_refused_before_any_change(
    workspace: Path, mirrors: dict[str, Path]
) -> None:
    lock = _lock(
        workspace, mirrors, "cu126.lock", "--cuda", "cu126", "--index-url", f"file://{mirrors['cu126']}",
        "--package", "gfhelper==1.0",
    )  # fmt: skip
    extra = env_vars(
        workspace, "wronglock", gpufleet_pip_index_url=f"file://{mirrors['pypi']}",
        gpufleet_torch_lock=str(lock),
    )  # fmt: skip
    result = run_roles(workspace, ["torch_env"], extra)
    assert result.returncode != 0
    assert recap(result)["changed"] == 0
    text = output(result)
    assert "was made for variant 'cu126', the plan needs 'cu130'" in text
    assert "was made for cuda '12.6', the plan needs '13.0'" in text
    assert not (workspace / "wronglock").exists()
