"""Rendering of the cluster_network and torch_env templates (firewalld zone, nccl.env,
pip.conf, .condarc) with Ansible's own templating, and cluster_network end to end on
localhost with temporary directories (idempotent rerun)."""

from __future__ import annotations

import configparser
import ipaddress
import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from roles_env_helpers import (
    BIN,
    REPO,
    ansible_env,
    ib_tree,
    output,
    recap,
    run_roles,
    write_inventory,
)

pytestmark = pytest.mark.ansible

PEERS: dict[str, str | None] = {"node02": "10.99.0.2", "node03": "10.99.0.3"}


def render(tmp_path: Path, role: str, template: str, variables: dict[str, Any]) -> str:
    """Render roles/<role>/templates/<template> with `ansible localhost -m template`."""
    dest = tmp_path / template.removesuffix(".j2")
    varfile = tmp_path / f"{template}.vars.json"
    varfile.write_text(json.dumps({"ansible_python_interpreter": str(BIN / "python"), **variables}))
    result = subprocess.run(
        [
            str(BIN / "ansible"),
            "localhost",
            "-c",
            "local",
            "-i",
            "localhost,",
            "-m",
            "ansible.builtin.template",
            "-a",
            f"src={REPO / 'roles' / role / 'templates' / template} dest={dest} mode=0644",
            "-e",
            f"@{varfile}",
        ],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, output(result)
    return dest.read_text()


def zone_vars(**over: Any) -> dict[str, Any]:
    return {
        "cluster_network_zone": "gpufleet",
        "cluster_network_rdzv_port": 29500,
        "cluster_network_group": "gpu_nodes",
        "cluster_network_source_mode": "addresses",
        "cluster_network_cidr": "10.99.0.0/24",
        "cluster_network_restrict_ports": False,
        "cluster_network_port_range": "32768-60999",
        "__cluster_network_sources": ["10.99.0.1", "10.99.0.2"],
        **over,
    }


def parse_zone(text: str) -> ET.Element:
    return ET.fromstring(text.split("\n", 1)[1] if text.startswith("<?xml") else text)


def test_zone_accepts_everything_from_the_sources_only(tmp_path: Path) -> None:
    zone = parse_zone(render(tmp_path, "cluster_network", "zone.xml.j2", zone_vars()))
    assert zone.get("target") == "ACCEPT"
    assert [s.get("address") for s in zone.findall("source")] == ["10.99.0.1", "10.99.0.2"]
    assert [(p.get("protocol"), p.get("port")) for p in zone.findall("port")] == [("tcp", "29500")]
    assert not zone.findall("service"), "the zone must not open services to anyone"
    assert not zone.findall("interface"), "a zone bound to an interface would accept everyone on it"


@pytest.mark.slow
def test_zone_with_restricted_ports(tmp_path: Path) -> None:
    text = render(
        tmp_path,
        "cluster_network",
        "zone.xml.j2",
        zone_vars(
            cluster_network_restrict_ports=True,
            cluster_network_source_mode="cidr",
            __cluster_network_sources=["10.99.0.0/24"],
        ),
    )
    zone = parse_zone(text)
    assert zone.get("target") is None  # default target: reject what the ports do not accept
    assert [s.get("address") for s in zone.findall("source")] == ["10.99.0.0/24"]
    assert [(p.get("protocol"), p.get("port")) for p in zone.findall("port")] == [
        ("tcp", "29500"),
        ("tcp", "32768-60999"),
    ]
    assert "network 10.99.0.0/24" in zone.findtext("description", "")


def pip_vars(**over: Any) -> dict[str, Any]:
    return {
        "__torch_env_pip_index": "https://download.pytorch.org/whl/cu128",
        "__torch_env_pip_purpose": "torch",
        "torch_env_pip_extra_index_urls": [],
        "torch_env_pip_find_links": [],
        "torch_env_pip_trusted_hosts": [],
        "torch_env_pip_timeout": 60,
        "torch_env_pip_retries": 3,
        **over,
    }


def test_pip_conf_minimal(tmp_path: Path) -> None:
    conf = configparser.ConfigParser()
    conf.read_string(render(tmp_path, "torch_env", "pip.conf.j2", pip_vars()))
    assert dict(conf["global"]) == {
        "index-url": "https://download.pytorch.org/whl/cu128",
        "timeout": "60",
        "retries": "3",
        "disable-pip-version-check": "true",
        "no-input": "true",
    }


@pytest.mark.slow
def test_pip_conf_mirrors(tmp_path: Path) -> None:
    text = render(
        tmp_path,
        "torch_env",
        "pip.conf.j2",
        pip_vars(
            __torch_env_pip_index="http://mirror.lan:8080/simple",
            torch_env_pip_extra_index_urls=["https://a.example/simple", "https://b.example/simple"],
            torch_env_pip_find_links=["/srv/wheels", "https://c.example/wheels/"],
            torch_env_pip_trusted_hosts=["mirror.lan:8080"],
        ),
    )
    conf = configparser.ConfigParser()
    conf.read_string(text)
    section = conf["global"]
    assert section["index-url"] == "http://mirror.lan:8080/simple"
    assert section["extra-index-url"].split() == [
        "https://a.example/simple",
        "https://b.example/simple",
    ]
    assert section["find-links"].split() == ["/srv/wheels", "https://c.example/wheels/"]
    assert section["trusted-host"].split() == ["mirror.lan:8080"]


def condarc_vars(**over: Any) -> dict[str, Any]:
    return {
        "torch_env_conda_root": "/opt/gpufleet/miniforge",
        "torch_env_conda_channels": ["conda-forge"],
        "torch_env_conda_channel_alias": "",
        "torch_env_conda_custom_channels": {},
        "torch_env_conda_timeout": 60,
        "__torch_env_home": "/var/lib/gpufleet/home/gpufleet",
        **over,
    }


def test_condarc_default(tmp_path: Path) -> None:
    rc = yaml.safe_load(render(tmp_path, "torch_env", "condarc.j2", condarc_vars()))
    assert rc["channels"] == ["conda-forge"]
    assert "channel_alias" not in rc
    assert rc["default_channels"] == []
    assert rc["auto_update_conda"] is False
    assert rc["remote_connect_timeout_secs"] == 60
    assert rc["pkgs_dirs"] == ["/var/lib/gpufleet/home/gpufleet/.cache/conda/pkgs"]


@pytest.mark.slow
def test_condarc_mirror(tmp_path: Path) -> None:
    rc = yaml.safe_load(
        render(
            tmp_path,
            "torch_env",
            "condarc.j2",
            condarc_vars(
                torch_env_conda_channel_alias="https://mirror.lan/conda",
                torch_env_conda_custom_channels={"pytorch": "https://mirror.lan/pytorch"},
                torch_env_conda_channels=["conda-forge", "pytorch"],
            ),
        )
    )
    assert rc["channel_alias"] == "https://mirror.lan/conda"
    assert rc["custom_channels"] == {"pytorch": "https://mirror.lan/pytorch"}
    assert rc["channels"] == ["conda-forge", "pytorch"]


def read_env_file(path: Path) -> dict[str, str]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def cluster_network_vars(tmp_path: Path, **over: Any) -> dict[str, Any]:
    return {
        "gpufleet_cluster_cidr": "10.99.0.0/24",
        "cluster_network_interface": "ib0",
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewalld_dir": str(tmp_path / "firewalld"),
        # this machine's own HCAs (if any) must not reach the expected nccl.env
        "cluster_network_ib_sysfs_root": str(tmp_path / "no-infiniband"),
        **over,
    }


def cluster_inventory(tmp_path: Path, peers: dict[str, str | None]) -> Path:
    """localhost (10.99.0.1) plus peers; a peer mapped to None has no address (and no facts).

    Host addresses go into the inventory: extra vars (-e) would apply to every host.
    """
    inventory = write_inventory(
        tmp_path / "inv.json",
        peers={k: v for k, v in peers.items() if v},
        gpufleet_cluster_address="10.99.0.1",
    )
    data = json.loads(inventory.read_text())
    for name, address in peers.items():
        if address is None:
            data["all"]["children"]["gpu_nodes"]["hosts"][name] = {}
    inventory.write_text(json.dumps(data))
    return inventory


def test_cluster_network_end_to_end_and_idempotent(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, PEERS)
    extra = cluster_network_vars(
        tmp_path,
        cluster_network_extra_sources=["10.98.0.0/28"],
        # two active InfiniBand ports, one in Polling, one active RoCE port
        cluster_network_ib_sysfs_root=str(ib_tree(tmp_path / "sys-ib")),
    )
    first = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert first.returncode == 0, output(first)
    assert recap(first)["changed"] > 0

    zone = parse_zone((tmp_path / "firewalld" / "zones" / "gpufleet.xml").read_text())
    assert [s.get("address") for s in zone.findall("source")] == [
        "10.98.0.0/28",
        "10.99.0.1",
        "10.99.0.2",
        "10.99.0.3",
    ]
    env = read_env_file(tmp_path / "etc" / "nccl.env")
    assert env == {
        "NCCL_SOCKET_IFNAME": "=ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
        "MASTER_ADDR": "10.99.0.1",
        "MASTER_PORT": "29500",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",  # the active InfiniBand ports only
    }
    manifest = json.loads((tmp_path / "etc" / "manifest.json").read_text())
    assert manifest["cluster_address"] == "10.99.0.1"
    assert manifest["cluster_interface"] == "ib0"
    assert manifest["env_file"] == str(tmp_path / "etc" / "nccl.env")

    second = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert second.returncode == 0, output(second)
    assert recap(second)["changed"] == 0, output(second)
    assert json.loads((tmp_path / "etc" / "manifest.json").read_text()) == manifest


@pytest.mark.slow
def test_cluster_network_rebuilds_a_truncated_manifest(tmp_path: Path) -> None:
    """A manifest cut off mid-way (full disk) is named and rebuilt, not a from_json error."""
    inventory = cluster_inventory(tmp_path, PEERS)
    extra = cluster_network_vars(tmp_path)
    manifest = tmp_path / "etc" / "manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text('{"schema": 1, "env_python": "/opt/gpufleet/env/bin/py')
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode == 0, output(result)
    said = " ".join(output(result).split())  # the yaml callback wraps long messages
    assert f"localhost: {manifest} is not valid JSON (truncated?)" in said
    assert "-> rebuilding it" in said
    data = json.loads(manifest.read_text())
    assert data["cluster_address"] == "10.99.0.1" and data["schema"] == 1


@pytest.mark.slow
def test_nccl_env_master_ib_and_extras(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, PEERS)
    extra = cluster_network_vars(
        tmp_path,
        gpufleet_master="node03",
        gpufleet_rdzv_port=29400,
        cluster_network_ifname_exact=False,
        cluster_network_ib_enable=True,
        cluster_network_ib_hca=["mlx5_0", "mlx5_1:1"],
        cluster_network_ib_gid_index=3,
        cluster_network_nccl_debug="INFO",
        cluster_network_nccl_extra_env={"NCCL_IB_TIMEOUT": 22},
        cluster_network_firewall="none",
    )
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode == 0, output(result)
    env = read_env_file(tmp_path / "etc" / "nccl.env")
    assert env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert env["MASTER_ADDR"] == "10.99.0.3"
    assert env["MASTER_PORT"] == "29400"
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1:1"
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_IB_TIMEOUT"] == "22"
    assert not (tmp_path / "firewalld").exists(), "cluster_network_firewall: none touches nothing"


@pytest.mark.slow
def test_nccl_env_is_valid_shell(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, PEERS)
    result = run_roles(tmp_path, ["cluster_network"], cluster_network_vars(tmp_path), inventory)
    assert result.returncode == 0, output(result)
    shell = subprocess.run(
        [
            "bash",
            "-c",
            f'set -a; . {tmp_path / "etc" / "nccl.env"}; echo "$NCCL_SOCKET_IFNAME|$MASTER_PORT"',
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.strip() == "=ib0|29500"


@pytest.mark.slow
def test_source_mode_cidr(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, PEERS)
    extra = cluster_network_vars(tmp_path, cluster_network_source_mode="cidr")
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode == 0, output(result)
    zone = parse_zone((tmp_path / "firewalld" / "zones" / "gpufleet.xml").read_text())
    assert [s.get("address") for s in zone.findall("source")] == ["10.99.0.0/24"]


@pytest.mark.slow
def test_unknown_peer_is_left_out_with_a_warning(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, {"node02": "10.99.0.2", "node04": None})
    result = run_roles(tmp_path, ["cluster_network"], cluster_network_vars(tmp_path), inventory)
    assert result.returncode == 0, output(result)
    assert "no cluster address known for node04" in output(result)
    zone = parse_zone((tmp_path / "firewalld" / "zones" / "gpufleet.xml").read_text())
    assert [s.get("address") for s in zone.findall("source")] == ["10.99.0.1", "10.99.0.2"]


@pytest.mark.slow
def test_master_without_address_fails_clearly(tmp_path: Path) -> None:
    inventory = cluster_inventory(tmp_path, {"node02": "10.99.0.2", "node04": None})
    extra = cluster_network_vars(tmp_path, gpufleet_master="node04")
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode != 0
    assert "rendezvous master node04" in output(result)


@pytest.mark.slow
def test_address_and_interface_derived_from_this_machine(tmp_path: Path) -> None:
    """No explicit address or interface: both come from this machine's facts."""
    ip = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=False,
    )
    found = [ln.split() for ln in ip.stdout.splitlines() if ln.strip()]
    if ip.returncode != 0 or not found:
        pytest.skip("no global IPv4 address on this machine")
    iface, cidr = found[0][1], found[0][3]
    address = cidr.split("/")[0]
    network = str(ipaddress.ip_network(cidr, strict=False))
    extra = {
        "gpufleet_cluster_cidr": network,
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewalld_dir": str(tmp_path / "firewalld"),
    }
    result = run_roles(tmp_path, ["cluster_network"], extra)
    assert result.returncode == 0, output(result)
    env = read_env_file(tmp_path / "etc" / "nccl.env")
    assert env["MASTER_ADDR"] == address
    assert env["GLOO_SOCKET_IFNAME"] == iface.split("@")[0]


@pytest.mark.slow
def test_single_node_cluster_on_loopback(tmp_path: Path) -> None:
    """The shipped local inventory: one node, cluster address 127.0.0.1."""
    inventory = write_inventory(tmp_path / "inv.json", gpufleet_cluster_address="127.0.0.1")
    extra = {
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewall": "none",
    }
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode == 0, output(result)
    env = read_env_file(tmp_path / "etc" / "nccl.env")
    assert env["NCCL_SOCKET_IFNAME"] == "=lo"
    assert env["MASTER_ADDR"] == "127.0.0.1"


@pytest.mark.slow
def test_loopback_refused_in_a_real_cluster(tmp_path: Path) -> None:
    inventory = write_inventory(
        tmp_path / "inv.json", peers={"node02": "10.0.0.2"}, gpufleet_cluster_address="127.0.0.1"
    )
    extra = {
        "cluster_network_config_dir": str(tmp_path / "etc"),
        "cluster_network_firewall": "none",
    }
    result = run_roles(tmp_path, ["cluster_network"], extra, inventory)
    assert result.returncode != 0
    assert "loopback" in output(result)
