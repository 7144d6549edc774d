"""torch_env and cluster_network run as roles refuse what only the node or the inventory can
tell (no address in the CIDR, a group that does not exist, a missing plan) before any change,
and keep credentials out of the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roles_env_helpers import PLAN, output, recap, run_roles

pytestmark = pytest.mark.ansible


def base_torch_env(tmp_path: Path) -> dict[str, Any]:
    return {
        "gpufleet_plan": PLAN,
        "torch_env_manager": "venv",
        "torch_env_prefix": str(tmp_path / "env"),
        "torch_env_state_dir": str(tmp_path / "state"),
        "torch_env_config_dir": str(tmp_path / "etc"),
        "torch_env_owner": "root",
        "torch_env_group": "root",
    }


def _assert_refused(tmp_path: Path, role: str, extra: dict[str, Any], fragments: list[str]) -> None:
    """Role ``role`` with ``extra`` fails, names every fragment and changes nothing."""
    result = run_roles(tmp_path, [role], extra)
    text = output(result)
    assert result.returncode != 0, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in output:\n{text[-3000:]}"
    assert recap(result)["changed"] == 0


def base_cluster_network(tmp_path: Path) -> dict[str, Any]:
    return {
        "gpufleet_cluster_cidr": "10.99.0.0/24",
        "gpufleet_cluster_address": "10.99.0.1",
        "cluster_network_interface": "ib0",
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewalld_dir": str(tmp_path / "firewalld"),
    }


def test_torch_env_needs_the_plan(tmp_path: Path) -> None:
    extra = base_torch_env(tmp_path)
    del extra["gpufleet_plan"]
    result = run_roles(tmp_path, ["torch_env"], extra)
    assert result.returncode != 0
    assert "gpufleet_plan is not set" in output(result)
    assert "preflight" in output(result)


def test_credentials_stay_out_of_the_log(tmp_path: Path) -> None:
    secret = "s3cr3t-t0ken"
    extra = {
        **base_torch_env(tmp_path),
        "gpufleet_pip_index_url": f"ftp://user:{secret}@nexus.example/simple",
    }
    result = run_roles(tmp_path, ["torch_env"], extra)
    assert result.returncode != 0
    assert secret not in output(result)


# Refusals that need the node (its addresses) or the inventory (its groups): the role's own
# checks. Plain bad values are the bad-input table's (tests/integration/test_bad_input.py).
CLUSTER_NETWORK_CASES = [
    pytest.param(
        {
            "gpufleet_cluster_address": "",
            "cluster_network_address": "",
            "gpufleet_cluster_cidr": "10.250.0.0/24",
            "cluster_network_interface": "",
        },
        ["has no address inside gpufleet_cluster_cidr"],
        id="no-address-in-cidr",
    ),
    pytest.param(
        {"cluster_network_group": "no_such_group"},
        ["cluster_network_group=no_such_group"],
        id="group",
    ),
    pytest.param(
        {"cluster_network_source_mode": "cidr", "gpufleet_cluster_address": "10.98.0.1"},
        ["outside gpufleet_cluster_cidr"],
        id="address-outside-cidr",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("override", "fragments"), CLUSTER_NETWORK_CASES)
def test_cluster_network_refuses_bad_input(
    tmp_path: Path, override: dict[str, Any], fragments: list[str]
) -> None:
    extra = {**base_cluster_network(tmp_path), **override}
    _assert_refused(tmp_path, "cluster_network", extra, fragments)
    assert not (tmp_path / "etc").exists()
    assert not (tmp_path / "firewalld").exists()
