"""gpufleet.planning.network: CIDR validation, address/interface derivation from ansible facts."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.planning import network as netcfg
from gpufleet.planning.network import NetConfigError


def facts(**ifaces: dict[str, Any]) -> dict[str, Any]:
    """An ansible_facts dict (no ansible_ prefix) with the given interfaces."""
    out: dict[str, Any] = {"interfaces": list(ifaces)}
    for name, data in ifaces.items():
        out[name.replace("-", "_").replace(".", "_")] = {"device": name, **data}
    return out


def v4(address: str, prefix: int = 24) -> dict[str, Any]:
    return {"address": address, "prefix": str(prefix)}


NODE = facts(
    lo={"type": "loopback", "ipv4": v4("127.0.0.1", 8)},
    eth0={"ipv4": v4("192.168.10.11"), "ipv6": [{"address": "fe80::1", "prefix": "64"}]},
    ib0={"ipv4": v4("10.20.0.11"), "ipv4_secondaries": [v4("10.30.0.11")]},
    **{"br-ex": {"ipv4": v4("172.16.0.5", 16), "ipv6": [{"address": "fd00::5", "prefix": "64"}]}},
)
NODE["default_ipv4"] = {"interface": "eth0", "address": "192.168.10.11"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("10.0.0.0/24", "10.0.0.0/24", id="v4"),
        pytest.param(" 10.0.0.0/8 ", "10.0.0.0/8", id="spaces"),
        pytest.param("fd00::/64", "fd00::/64", id="v6"),
        pytest.param("10.1.2.3/32", "10.1.2.3/32", id="host-route"),
    ],
)
def test_validated_cidr_accepts_networks(text: str, expected: str) -> None:
    assert netcfg.validated_cidr(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        pytest.param("10.0.0.5/24", "did you mean 10.0.0.0/24", id="host-bits"),
        pytest.param("10.0.0.0", "no prefix length", id="no-prefix"),
        pytest.param("10.0.0.0/33", "not a network", id="prefix-too-long"),
        pytest.param("300.0.0.0/8", "not a network", id="bad-octet"),
        pytest.param("", "must be a network", id="empty"),
        pytest.param(None, "must be a network", id="none"),
        pytest.param("eth0", "no prefix length", id="word"),
    ],
)
def test_validated_cidr_refuses_with_the_variable_name(text: Any, fragment: str) -> None:
    with pytest.raises(NetConfigError, match="gpufleet_cluster_cidr") as info:
        netcfg.validated_cidr(text)
    assert fragment in str(info.value)


def test_refusal_is_exit_code_2() -> None:
    with pytest.raises(NetConfigError) as info:
        netcfg.validated_cidr("bogus")
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("address", "cidr", "inside"),
    [
        ("10.0.0.5", "10.0.0.0/24", True),
        ("10.0.1.5", "10.0.0.0/24", False),
        ("10.0.0.5/24", "10.0.0.0/24", True),
        ("fd00::5", "10.0.0.0/24", False),
        ("fd00::5", "fd00::/64", True),
    ],
)
def test_address_in_cidr(address: str, cidr: str, inside: bool) -> None:
    assert netcfg.address_in_cidr(address, cidr) is inside


def test_node_addresses_order_default_route_first_then_by_name() -> None:
    pairs = [(a.interface, a.address) for a in netcfg.node_addresses(NODE)]
    assert pairs == [
        ("eth0", "192.168.10.11"),  # default route; its link-local v6 is left out
        ("br-ex", "172.16.0.5"),
        ("br-ex", "fd00::5"),
        ("ib0", "10.20.0.11"),
        ("ib0", "10.30.0.11"),  # secondary address
        ("lo", "127.0.0.1"),
    ]


def test_node_addresses_reads_netmask_when_prefix_missing() -> None:
    node = facts(eth1={"ipv4": {"address": "10.0.0.7", "netmask": "255.255.0.0"}})
    assert netcfg.node_addresses(node)[0].prefix == 16


def test_node_addresses_accepts_prefixed_fact_names() -> None:
    node = {
        "ansible_interfaces": ["eth1"],
        "ansible_eth1": {"device": "eth1", "ipv4": v4("10.0.0.7")},
    }
    assert [a.address for a in netcfg.node_addresses(node)] == ["10.0.0.7"]


@pytest.mark.parametrize(
    ("cidr", "expected"),
    [
        pytest.param("10.20.0.0/24", "10.20.0.11", id="ib-network"),
        pytest.param("10.30.0.0/24", "10.30.0.11", id="secondary"),
        pytest.param("172.16.0.0/16", "172.16.0.5", id="dashed-interface"),
        pytest.param("fd00::/64", "fd00::5", id="ipv6"),
        pytest.param("10.99.0.0/24", "", id="none"),
    ],
)
def test_cluster_address_is_the_first_address_inside_the_cidr(cidr: str, expected: str) -> None:
    assert netcfg.cluster_address(NODE, cidr) == expected


@pytest.mark.parametrize(
    ("address", "interface"),
    [
        ("10.20.0.11", "ib0"),
        ("10.30.0.11", "ib0"),
        ("192.168.10.11", "eth0"),
        ("172.16.0.5", "br-ex"),
        ("fd00::5", "br-ex"),
    ],
)
def test_interface_for_address(address: str, interface: str) -> None:
    assert netcfg.interface_for_address(NODE, address) == interface


def test_interface_for_unknown_address_names_the_fix() -> None:
    with pytest.raises(NetConfigError) as info:
        netcfg.interface_for_address(NODE, "10.20.0.99")
    message = str(info.value)
    assert "gpufleet_cluster_address" in message
    assert "ib0=10.20.0.11" in message


def test_interface_for_loopback_address_is_refused() -> None:
    with pytest.raises(NetConfigError, match="loopback"):
        netcfg.interface_for_address(NODE, "127.0.0.1")


def test_loopback_is_accepted_for_a_single_node_cluster() -> None:
    assert netcfg.interface_for_address(NODE, "127.0.0.1", allow_loopback=True) == "lo"


def test_interface_for_malformed_address() -> None:
    with pytest.raises(NetConfigError, match="not an IPv4 or IPv6 address"):
        netcfg.interface_for_address(NODE, "10.20.0")


@pytest.mark.parametrize("name", ["eth0", "ib0", "br-ex", "enp1s0f0np0", "bond0.100"])
def test_validated_ifname_accepts(name: str) -> None:
    assert netcfg.validated_ifname(name) == name


@pytest.mark.parametrize("name", ["", "a" * 16, "eth 0", "eth/0", "..", "eth0:1", 5])
def test_validated_ifname_refuses(name: Any) -> None:
    with pytest.raises(NetConfigError, match="cluster_network_interface"):
        netcfg.validated_ifname(name)


def test_firewall_sources_sorted_distinct_v4_first() -> None:
    got = netcfg.firewall_sources(["10.0.0.2", "fd00::1", "10.0.0.10", "10.0.0.2", "10.1.0.0/16"])
    assert got == ["10.0.0.10", "10.0.0.2", "10.1.0.0/16", "fd00::1"]


def test_firewall_sources_refuses_host_bits_and_words() -> None:
    with pytest.raises(NetConfigError):
        netcfg.firewall_sources(["10.0.0.1/24"])
    with pytest.raises(NetConfigError):
        netcfg.firewall_sources(["node01"])


def test_env_file_lines() -> None:
    lines = netcfg.env_file_lines({"NCCL_SOCKET_IFNAME": "=ib0", "MASTER_PORT": 29500})
    assert lines == ["NCCL_SOCKET_IFNAME==ib0", "MASTER_PORT=29500"]


@pytest.mark.parametrize(
    "values",
    [{"BAD-NAME": "x"}, {"X": "a b"}, {"X": "$(reboot)"}, {"X": "a\nB=c"}, {"X": '"q"'}],
)
def test_env_file_lines_refuses_unsafe(values: dict[str, Any]) -> None:
    with pytest.raises(NetConfigError):
        netcfg.env_file_lines(values)


class _HostVars(dict[str, Any]):
    pass


def test_peer_addresses_explicit_then_facts_then_missing() -> None:
    hostvars = _HostVars(
        a={"gpufleet_cluster_address": "10.20.0.1"},
        b={"ansible_facts": NODE},
        c={},
        d={"gpufleet_cluster_address": ""},
    )
    got = netcfg.peer_addresses(hostvars, ["a", "b", "c", "d"], "10.20.0.0/24")
    assert got == {"addresses": {"a": "10.20.0.1", "b": "10.20.0.11"}, "missing": ["c", "d"]}


def test_peer_addresses_refuses_a_malformed_explicit_address() -> None:
    with pytest.raises(NetConfigError, match="gpufleet_cluster_address of a"):
        netcfg.peer_addresses({"a": {"gpufleet_cluster_address": "10.20.0"}}, ["a"], "10.20.0.0/24")
