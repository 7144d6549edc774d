"""torch_env for real on localhost: venv manager, torch from the local wheelhouse
(/opt/wheels via gpufleet_pip_find_links), a file:// index, no internet. Proves that a
second run changes nothing and that a mismatching build is replaced or refused."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roles_env_helpers import BIN, PLAN, REPO, output, recap, run_roles
from torch_env_workspace import BASE_PYTHON, LOCAL_INDEX, TORCH_WHEELS, workspace_dir

pytestmark = [pytest.mark.slow, pytest.mark.ansible]

PACKAGES = [
    "nvidia-ml-py==13.615.71",
    "pytest==9.1.1",
    "pytest-timeout==2.4.0",
    "jinja2==3.1.6",
    "numpy==2.4.6",
]


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    yield from workspace_dir("gpufleet-venv-", "runs the role as root (runuser to the env owner)")


@pytest.fixture(scope="module")
def wheelhouse(workspace: Path) -> Path:
    """The gpufleet wheel and the pinned node packages (downloaded once, before the run)."""
    house = workspace / "wheelhouse"
    house.mkdir()
    subprocess.run(
        [
            str(BIN / "python"),
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(workspace / "dist"),
            str(REPO),
        ],
        check=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": "315532800"},
    )
    got = subprocess.run(
        [str(BIN / "python"), "-m", "pip", "download", "-q", "-d", str(house), *PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        pytest.skip(f"cannot fill the test wheelhouse: {got.stderr[-500:]}")
    return house


def env_vars(workspace: Path, wheelhouse: Path, **over: Any) -> dict[str, Any]:
    return {
        "gpufleet_plan": PLAN,  # a CUDA plan ...
        "torch_env_wheel_variant": "cpu",  # ... with a CPU env (image baking)
        "torch_env_manager": "venv",
        "torch_env_python": str(BASE_PYTHON),
        "torch_env_prefix": str(workspace / "env"),
        "torch_env_state_dir": str(workspace / "state"),
        "torch_env_config_dir": str(workspace / "etc"),
        "torch_env_owner": "nobody",
        "torch_env_group": "nogroup",
        "torch_env_create_owner": False,
        "gpufleet_pip_index_url": LOCAL_INDEX,
        # the CPU build comes labelled (+cpu) from the local wheelhouse, as from the PyTorch
        # index; LOCAL_INDEX alone would be taken for a PyPI mirror, which has no CPU build
        "gpufleet_torch_source": "pytorch-index",
        "gpufleet_pip_find_links": [str(TORCH_WHEELS), str(wheelhouse)],
        "torch_env_gpufleet_wheel": str(next((workspace / "dist").glob("gpufleet-*.whl"))),
        **over,
    }


def test_first_run_builds_the_env(workspace: Path, wheelhouse: Path) -> None:
    result = run_roles(workspace, ["torch_env"], env_vars(workspace, wheelhouse), timeout=1200)
    assert result.returncode == 0, output(result)[-5000:]
    python = workspace / "env" / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import torch, gpufleet, pynvml, pytest, numpy; print(torch.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "2.13.0+cpu"
    assert (workspace / "env").stat().st_uid != 0, "the env belongs to torch_env_owner"
    manifest = json.loads((workspace / "etc" / "manifest.json").read_text())
    assert manifest["env_torch"] == "2.13.0+cpu"
    assert manifest["env_wheel_variant"] == "cpu"
    assert manifest["env_python"] == str(python)
    assert manifest["plan"]["expected_build"] == "2.13.0+cu128"
    assert manifest["schema"] == 1
    pip_conf = (workspace / "env" / "pip.conf").read_text()
    assert LOCAL_INDEX in pip_conf
    assert str(TORCH_WHEELS) in pip_conf


def test_second_run_changes_nothing(workspace: Path, wheelhouse: Path) -> None:
    before = (workspace / "etc" / "manifest.json").read_text()
    result = run_roles(workspace, ["torch_env"], env_vars(workspace, wheelhouse), timeout=600)
    assert result.returncode == 0, output(result)[-5000:]
    assert recap(result)["changed"] == 0, output(result)[-5000:]
    assert (workspace / "etc" / "manifest.json").read_text() == before


def test_mismatching_build_is_refused_with_on_mismatch_fail(
    workspace: Path, wheelhouse: Path
) -> None:
    extra = env_vars(
        workspace, wheelhouse, torch_env_wheel_variant="", torch_env_on_mismatch="fail"
    )
    result = run_roles(workspace, ["torch_env"], extra, timeout=600)
    assert result.returncode != 0
    text = output(result)
    assert "holds Python 3.11 with torch 2.13.0+cpu" in text
    assert "torch 2.13.0+cu128" in text
    assert "torch_env_on_mismatch: replace" in text
    assert recap(result)["changed"] == 0


def test_mismatching_build_is_replaced(workspace: Path, wheelhouse: Path) -> None:
    """A CUDA build was planned but only the CPU wheel exists offline: replace tries
    (pip looks for torch==2.13.0+cu128) and fails clearly without breaking the env."""
    extra = env_vars(workspace, wheelhouse, torch_env_wheel_variant="")
    result = run_roles(workspace, ["torch_env"], extra, timeout=600)
    assert result.returncode != 0
    assert "torch==2.13.0+cu128" in output(result)
    probe = subprocess.run(
        [str(workspace / "env" / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "2.13.0+cpu", "a failed replacement leaves the old build usable"
