"""Bad input to torch_env and cluster_network fails before any change, naming the variable."""

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


def base_cluster_network(tmp_path: Path) -> dict[str, Any]:
    return {
        "gpufleet_cluster_cidr": "10.99.0.0/24",
        "gpufleet_cluster_address": "10.99.0.1",
        "cluster_network_interface": "ib0",
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewalld_dir": str(tmp_path / "firewalld"),
    }


TORCH_ENV_CASES = [
    pytest.param({"torch_env_manager": "pip"}, ["torch_env_manager", "conda, venv"], id="manager"),
    pytest.param(
        {"torch_env_pip_timeout": "soon"}, ["torch_env_pip_timeout", "int"], id="timeout-type"
    ),
    pytest.param({"torch_env_create_owner": "maybe"}, ["torch_env_create_owner"], id="bool-type"),
    pytest.param(
        {"torch_env_on_mismatch": "ignore"}, ["torch_env_on_mismatch"], id="mismatch-choice"
    ),
    pytest.param(
        {"torch_env_pip_find_links": "/srv/w"}, ["torch_env_pip_find_links"], id="list-type"
    ),
    pytest.param(
        {"torch_env_pip_retries": -1}, ["torch_env_pip_retries=-1", ">= 0"], id="negative"
    ),
    pytest.param(
        {"torch_env_prefix": "opt/env"}, ["torch_env_prefix=opt/env", "absolute"], id="relative"
    ),
    pytest.param(
        {"torch_env_prefix": "/opt"}, ["torch_env_prefix=/opt", "system directory"], id="system-dir"
    ),
    pytest.param({"torch_env_state_dir": "/var/../etc"}, ["torch_env_state_dir"], id="dotdot"),
    pytest.param(
        {"torch_env_wheel_variant": "gpu"}, ["torch_env_wheel_variant='gpu'"], id="variant"
    ),
    pytest.param(
        {"gpufleet_pip_index_url": "ftp://mirror/simple"},
        ["torch_env_pip_index_url", "scheme"],
        id="index-scheme",
    ),
    pytest.param(
        {"torch_env_pypi_index_url": "https:///simple"},
        ["torch_env_pypi_index_url", "no host"],
        id="index-host",
    ),
    pytest.param(
        {"gpufleet_pip_find_links": ["wheels"]},
        ["torch_env_pip_find_links", "absolute path"],
        id="find-links",
    ),
    pytest.param(
        {"gpufleet_pip_index_url": "http://mirror.lan/simple"},
        ["mirror.lan", "gpufleet_pip_trusted_hosts"],
        id="http-untrusted",
    ),
    pytest.param(
        {"gpufleet_python_version": "3.9", "gpufleet_plan": {**PLAN, "python": "3.9"}},
        ["torch_env_python_version=3.9", "outside"],
        id="python-range",
    ),
    pytest.param(
        {"torch_env_python_version": "python3"},
        ["torch_env_python_version=python3"],
        id="python-format",
    ),
    pytest.param({"torch_env_owner": "Bad User"}, ["torch_env_owner=Bad User"], id="owner-name"),
    pytest.param(
        {"torch_env_manager": "conda", "torch_env_miniforge_version": "24.1.0-0"},
        ["No verified SHA-256", "gpufleet_miniforge_sha256"],
        id="miniforge-unpinned",
    ),
    pytest.param(
        {"torch_env_manager": "conda", "torch_env_miniforge_sha256": "abc"},
        ["No verified SHA-256"],
        id="miniforge-sha-format",
    ),
    pytest.param(
        {"torch_env_manager": "conda", "torch_env_conda_channel_alias": "mirror/conda"},
        ["torch_env_conda_channel_alias"],
        id="channel-alias",
    ),
]


@pytest.mark.parametrize(("override", "fragments"), TORCH_ENV_CASES)
def test_torch_env_refuses_bad_input(
    tmp_path: Path, override: dict[str, Any], fragments: list[str]
) -> None:
    result = run_roles(tmp_path, ["torch_env"], {**base_torch_env(tmp_path), **override})
    text = output(result)
    assert result.returncode != 0, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in output:\n{text[-3000:]}"
    assert recap(result)["changed"] == 0
    assert not (tmp_path / "state").exists(), "a refused input must not change the node"


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


CLUSTER_NETWORK_CASES = [
    pytest.param(
        {"gpufleet_cluster_cidr": "10.99.0.5/24"},
        ["gpufleet_cluster_cidr", "did you mean 10.99.0.0/24"],
        id="cidr-host-bits",
    ),
    pytest.param(
        {"gpufleet_cluster_cidr": "bogus"},
        ["gpufleet_cluster_cidr", "no prefix length"],
        id="cidr-word",
    ),
    pytest.param(
        {"gpufleet_cluster_cidr": "10.0.0.0/40"},
        ["gpufleet_cluster_cidr", "not a network"],
        id="cidr-prefix",
    ),
    pytest.param(
        {"gpufleet_cluster_address": "10.99.0"},
        ["gpufleet_cluster_address", "not an IPv4"],
        id="address",
    ),
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
    pytest.param({"gpufleet_rdzv_port": 70000}, ["gpufleet_rdzv_port", "1-65535"], id="port-range"),
    pytest.param({"gpufleet_rdzv_port": "http"}, ["cluster_network_rdzv_port"], id="port-type"),
    pytest.param(
        {"cluster_network_port_range": "60999-32768"},
        ["cluster_network_port_range"],
        id="port-range-order",
    ),
    pytest.param(
        {"cluster_network_source_mode": "all"},
        ["cluster_network_source_mode", "addresses, cidr"],
        id="source-mode",
    ),
    pytest.param(
        {"cluster_network_firewall": "iptables"}, ["cluster_network_firewall"], id="firewall"
    ),
    pytest.param({"cluster_network_zone": "public"}, ["cluster_network_zone"], id="builtin-zone"),
    pytest.param(
        {"cluster_network_interface": "eth 0"}, ["cluster_network_interface"], id="ifname"
    ),
    pytest.param(
        {"cluster_network_ib_enable": True}, ["cluster_network_ib_hca"], id="ib-without-hca"
    ),
    pytest.param({"cluster_network_ib_hca": "mlx5_0"}, ["cluster_network_ib_hca"], id="hca-type"),
    pytest.param(
        {"cluster_network_extra_sources": ["login01"]},
        ["login01", "not a valid firewall source"],
        id="extra-source",
    ),
    pytest.param(
        {"cluster_network_nccl_extra_env": {"X": "a b"}},
        ["must not need shell quoting"],
        id="extra-env",
    ),
    pytest.param(
        {"cluster_network_nccl_debug": "LOUD"}, ["cluster_network_nccl_debug"], id="nccl-debug"
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


@pytest.mark.parametrize(("override", "fragments"), CLUSTER_NETWORK_CASES)
def test_cluster_network_refuses_bad_input(
    tmp_path: Path, override: dict[str, Any], fragments: list[str]
) -> None:
    extra = {**base_cluster_network(tmp_path), **override}
    result = run_roles(tmp_path, ["cluster_network"], extra)
    text = output(result)
    assert result.returncode != 0, text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in output:\n{text[-3000:]}"
    assert recap(result)["changed"] == 0
    assert not (tmp_path / "etc").exists()
    assert not (tmp_path / "firewalld").exists()
