"""torch_env's conda path on localhost with a stand-in Miniforge installer (a file:// URL
and its SHA-256; tests/fixtures/fake_miniforge): checks download + checksum, the unattended
install, .condarc, `conda create` arguments and the idempotent rerun. The real installer
needs the internet, which tests do not use."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from roles_env_helpers import PLAN, REPO, output, recap, run_roles
from torch_env_workspace import BASE_PYTHON, LOCAL_INDEX, TORCH_WHEELS, workspace_dir

pytestmark = [pytest.mark.slow, pytest.mark.ansible]

INSTALLER = REPO / "tests" / "fixtures" / "fake_miniforge" / "installer.sh"


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    yield from workspace_dir("gpufleet-conda-", "runs the role as root")


def conda_vars(workspace: Path, **over: Any) -> dict[str, Any]:
    mirror = workspace / "mirror" / "26.7.2-0"
    mirror.mkdir(parents=True, exist_ok=True)
    name = "Miniforge3-26.7.2-0-Linux-x86_64.sh"
    shutil.copy(INSTALLER, mirror / name)
    return {
        "gpufleet_plan": PLAN,
        "torch_env_wheel_variant": "cpu",
        "torch_env_manager": "conda",
        "torch_env_prefix": str(workspace / "env"),
        "torch_env_conda_root": str(workspace / "miniforge"),
        "torch_env_state_dir": str(workspace / "state"),
        "torch_env_config_dir": str(workspace / "etc"),
        "torch_env_owner": "root",
        "torch_env_group": "root",
        "torch_env_miniforge_base_url": f"file://{workspace / 'mirror'}",
        "torch_env_miniforge_sha256": hashlib.sha256(INSTALLER.read_bytes()).hexdigest(),
        "torch_env_conda_channel_alias": "https://conda-mirror.lan/conda",
        "gpufleet_pip_index_url": LOCAL_INDEX,
        "gpufleet_torch_source": "pytorch-index",  # the +cpu build, labelled (find-links)
        "gpufleet_pip_find_links": [str(TORCH_WHEELS)],
        "torch_env_packages": [],
        "torch_env_install_gpufleet": False,
        **over,
    }


def test_conda_path_installs_and_reruns_clean(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_CONDA_PYTHON", str(BASE_PYTHON))  # inherited by ansible
    extra = conda_vars(workspace)
    first = run_roles(workspace, ["torch_env"], extra, timeout=1200)
    assert first.returncode == 0, output(first)[-5000:]
    calls = (workspace / "miniforge" / "conda-calls.log").read_text().splitlines()
    assert len(calls) == 1
    assert "--override-channels" in calls[0]
    assert "--channel=conda-forge" in calls[0]
    assert "python=3.11" in calls[0]
    condarc = yaml.safe_load((workspace / "miniforge" / ".condarc").read_text())
    assert condarc["channel_alias"] == "https://conda-mirror.lan/conda"
    assert condarc["auto_update_conda"] is False
    downloaded = workspace / "state" / "downloads" / "Miniforge3-26.7.2-0-Linux-x86_64.sh"
    assert downloaded.read_bytes() == INSTALLER.read_bytes()

    second = run_roles(workspace, ["torch_env"], extra, timeout=600)
    assert second.returncode == 0, output(second)[-5000:]
    assert recap(second)["changed"] == 0, output(second)[-5000:]
    assert len((workspace / "miniforge" / "conda-calls.log").read_text().splitlines()) == 1


def test_wrong_checksum_is_refused_before_anything_runs(workspace: Path) -> None:
    extra = conda_vars(
        workspace,
        torch_env_conda_root=str(workspace / "other-miniforge"),
        torch_env_state_dir=str(workspace / "other-state"),
        torch_env_miniforge_sha256="0" * 64,
    )
    result = run_roles(workspace, ["torch_env"], extra, timeout=600)
    assert result.returncode != 0
    assert "checksum" in output(result).lower()
    assert not (workspace / "other-miniforge" / "bin" / "conda").exists()


def test_a_channel_alias_with_credentials_is_root_and_group_only(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conda mirror URL with user:password@ (docs/security.md, "Credentials"): .condarc
    becomes 0640 (root and the env's group), and neither -v output nor the rest of the env
    shows the password."""
    monkeypatch.setenv("FAKE_CONDA_PYTHON", str(BASE_PYTHON))
    secret = "cPw-51e0a7"
    extra = conda_vars(
        workspace, torch_env_conda_channel_alias=f"https://site:{secret}@conda-mirror.lan/conda"
    )
    run = run_roles(workspace, ["torch_env"], extra, timeout=600)
    assert run.returncode == 0, output(run)[-5000:]
    condarc = workspace / "miniforge" / ".condarc"
    assert condarc.stat().st_mode & 0o777 == 0o640
    assert secret in condarc.read_text(), "conda reads the alias from here"
    assert secret not in output(run)
    others = [
        p
        for p in (workspace / "env").rglob("*")
        if p.is_file() and p.stat().st_mode & 0o004 and secret.encode() in p.read_bytes()
    ]
    assert others == [], others
