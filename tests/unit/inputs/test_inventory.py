"""gpufleet.inputs.inventory: cluster-level inventory checks (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.errors import EXIT_REFUSED
from gpufleet.inputs.inventory import (
    InventoryError,
    InventoryNode,
    as_int,
    check_inventory,
    inventory_problems,
    nodes_from_hostvars,
)

CIDR = "10.0.0.0/24"


def node(name: str, address: object = None, **kw: Any) -> InventoryNode:
    return InventoryNode(name, cluster_address=address, cidr=kw.pop("cidr", CIDR), **kw)


def good() -> list[InventoryNode]:
    return [
        node("gpu01", "10.0.0.11", rdzv_port=29500),
        node("gpu02", "10.0.0.12", rdzv_port=29500),
    ]


def test_a_good_inventory_has_no_problem() -> None:
    assert inventory_problems(good()) == []
    check_inventory(good())


def test_unset_values_are_not_checked() -> None:
    nodes = [InventoryNode("a"), InventoryNode("b", cluster_address="", ansible_host="")]
    assert inventory_problems(nodes) == []


def test_empty_group() -> None:
    (msg,) = inventory_problems([], group="gpu_nodes")
    assert "gpu_nodes has no hosts" in msg
    assert "gpu_nodes=[]" in msg
    assert "one or more hosts" in msg


def test_duplicate_cluster_address_names_both_nodes() -> None:
    nodes = [node("node1", "10.0.0.5"), node("node2", "10.0.0.5"), node("node3", "10.0.0.6")]
    (msg,) = inventory_problems(nodes)
    assert msg.startswith(
        "gpufleet_cluster_address='10.0.0.5' is used by node1 and node2: every node needs its "
        "own address"
    )


def test_duplicate_is_found_after_normalisation() -> None:
    nodes = [node("a", "fd00::1", cidr="fd00::/64"), node("b", "fd00:0::0001", cidr="fd00::/64")]
    (msg,) = inventory_problems(nodes)
    assert "'fd00::1' is used by a and b" in msg


def test_duplicate_ansible_host_without_cluster_address() -> None:
    nodes = [
        InventoryNode("a", ansible_host="192.168.1.10"),
        InventoryNode("b", ansible_host="192.168.1.10"),
        InventoryNode("c", ansible_host="192.168.1.10", cluster_address="10.0.0.3", cidr=CIDR),
    ]
    (msg,) = inventory_problems(nodes)
    assert "ansible_host='192.168.1.10' is used by a and b" in msg
    assert "gpufleet_cluster_address per node" in msg


def test_same_ansible_host_on_other_ssh_ports_is_allowed() -> None:
    nodes = [
        InventoryNode("a", ansible_host="bastion", ansible_port=2201),
        InventoryNode("b", ansible_host="bastion", ansible_port=2202),
    ]
    assert inventory_problems(nodes) == []


def test_master_must_be_a_host_of_the_group() -> None:
    nodes = [node("gpu01", "10.0.0.11", master="gpu09"), node("gpu02", "10.0.0.12", master="gpu09")]
    (msg,) = inventory_problems(nodes)
    assert "gpufleet_master='gpu09' is not a host of gpu_nodes" in msg
    assert "allowed: gpu01 or gpu02" in msg
    assert inventory_problems([node("gpu01", "10.0.0.11", master="gpu01")]) == []


@pytest.mark.parametrize(
    ("cidr", "words"),
    [
        pytest.param("10.0.0.0/33", ["'10.0.0.0/33' is not a network", "prefix 0-32"], id="prefix"),
        pytest.param("banana", ["'banana' has no prefix length", "10.0.0.0/24"], id="word"),
        pytest.param("10.0.0.5/24", ["host bits set", "10.0.0.0/24"], id="host-bits"),
        pytest.param("300.1.0.0/16", ["is not a network"], id="octet"),
        pytest.param(24, ["gpufleet_cluster_cidr=24 is not a network"], id="int"),
    ],
)
def test_bad_cidr(cidr: object, words: list[str]) -> None:
    (msg,) = inventory_problems([node("a", "10.0.0.1", cidr=cidr)])
    assert msg.startswith("gpufleet_cluster_cidr=")
    for w in words:
        assert w in msg


def test_address_outside_the_cidr() -> None:
    (msg,) = inventory_problems([node("a", "10.0.0.1"), node("b", "10.0.1.2")])
    assert msg == (
        "b: gpufleet_cluster_address='10.0.1.2' is outside gpufleet_cluster_cidr='10.0.0.0/24' "
        "-> allowed: an address inside 10.0.0.0/24, or a gpufleet_cluster_cidr that holds it"
    )


def test_loopback_is_allowed_for_a_single_node_only() -> None:
    assert inventory_problems([node("localhost", "127.0.0.1")]) == []
    problems = inventory_problems([node("n1", "127.0.0.1"), node("n2", "127.0.0.2")])
    assert len(problems) == 2
    assert all("is outside gpufleet_cluster_cidr" in p for p in problems)


def test_malformed_address() -> None:
    (msg,) = inventory_problems([node("a", "10.0.0")])
    assert "a: gpufleet_cluster_address='10.0.0' is not an IP address" in msg
    assert "IPv4 or IPv6" in msg


@pytest.mark.parametrize(
    ("port", "why"),
    [
        (0, "is not a TCP port"),
        (70000, "is not a TCP port"),
        ("http", "is not an integer"),
        (True, "is not an integer"),
        (-1, "is not a TCP port"),
    ],
)
def test_rendezvous_port(port: object, why: str) -> None:
    (msg,) = inventory_problems([node("a", "10.0.0.1", rdzv_port=port)])
    assert msg.startswith("gpufleet_rdzv_port=")
    assert why in msg
    assert "1-65535" in msg


def test_port_as_string_of_digits_is_fine() -> None:
    assert inventory_problems([node("a", "10.0.0.1", rdzv_port="29500")]) == []


def test_cluster_wide_settings_must_agree() -> None:
    nodes = [node("a", "10.0.0.1", rdzv_port=29500), node("b", "10.0.0.2", rdzv_port=29501)]
    (msg,) = inventory_problems(nodes)
    assert "gpufleet_rdzv_port differs between the nodes" in msg
    assert "gpufleet_rdzv_port=29500 on a" in msg and "gpufleet_rdzv_port=29501 on b" in msg


def test_every_problem_is_reported_at_once() -> None:
    nodes = [node("a", "10.0.0.1", master="x"), node("b", "10.0.0.1", master="x")]
    with pytest.raises(InventoryError) as info:
        check_inventory(nodes)
    lines = str(info.value).splitlines()
    assert len(lines) == 2
    assert info.value.exit_code == EXIT_REFUSED


def test_nodes_from_hostvars() -> None:
    hostvars = {
        "a": {
            "gpufleet_cluster_address": "10.0.0.1",
            "ansible_host": "h1",
            "gpufleet_rdzv_port": 1,
        },
        "b": {"gpufleet_master": "a", "gpufleet_cluster_cidr": CIDR, "ansible_port": 22},
        "c": {},
    }
    a, b = nodes_from_hostvars(hostvars, ["a", "b"])
    assert a == InventoryNode("a", "10.0.0.1", "h1", None, None, None, 1)
    assert b == InventoryNode("b", None, None, 22, "a", CIDR, None)


# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        ("3", 3),
        (" -2 ", -2),
        (2.0, 2),
        (2.5, None),
        (True, None),
        ("x", None),
        (None, None),
    ],
)
def test_as_int(value: object, expected: int | None) -> None:
    assert as_int(value) == expected


# --------------------------------------------------------------------------- issue 29 item 3


@pytest.mark.parametrize(
    ("port", "words"),
    [
        (22, ["is the port of SSH"]),
        (443, ["is the port of HTTPS"]),
        (6818, ["is the port of slurmd"]),
        (80, ["is the port of HTTP"]),
        (1023, ["is a privileged port (below 1024)"]),
        (7, ["is a privileged port"]),
    ],
)
def test_the_rendezvous_port_is_no_service_port(port: int, words: list[str]) -> None:
    (msg,) = inventory_problems([node("a", "10.0.0.1", rdzv_port=port)])
    assert msg.startswith(f"gpufleet_rdzv_port={port} ")
    assert "a port 1024-65535 that no service of the nodes uses" in msg
    for word in words:
        assert word in msg, msg


@pytest.mark.parametrize(
    ("attr", "var"), [("ansible_port", "ansible_port"), ("probe_port", "verify_probe_port")]
)
def test_the_rendezvous_port_clashes_with_no_other_port(attr: str, var: str) -> None:
    nodes = [node("a", "10.0.0.1", rdzv_port=2222, **{attr: "2222"}), node("b", "10.0.0.2")]
    (msg,) = inventory_problems(nodes)
    assert msg.startswith("gpufleet_rdzv_port=2222 is ")
    assert f"on a ({var}=2222)" in msg or f"of a ({var}=2222)" in msg
    assert "ports must not clash" in msg


@pytest.mark.parametrize(
    ("address", "cidr", "why"),
    [
        ("fe80::1%eth0", "fe80::/64", "has a zone (%interface)"),
        ("10.0.0.1%eth0", CIDR, "has a zone"),
        ("fd00::5%2", "fd00::/64", "has a zone"),
        ("fe80::1", "fe80::/64", "IPv6 link-local"),
        ("224.0.0.1", CIDR, "multicast"),
        ("0.0.0.0", CIDR, "unspecified"),
        ("::", "fd00::/64", "unspecified"),
        (" 10.0.0.1", CIDR, "leading or trailing whitespace"),
        ("10.0.0.0", CIDR, "is the network address of 10.0.0.0/24"),
        ("10.0.0.255", CIDR, "is the broadcast address of 10.0.0.0/24"),
        ("10.0.3.255", "10.0.0.0/22", "is the broadcast address of 10.0.0.0/22"),
        ("fd00::", "fd00::/64", "is the network address of fd00::/64"),
    ],
)
def test_address_forms_no_node_can_use(address: str, cidr: str, why: str) -> None:
    problems = inventory_problems([node("a", address, cidr=cidr)])
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"a: gpufleet_cluster_address={address!r} ")
    assert why in problems[0], problems[0]


@pytest.mark.parametrize(
    ("address", "cidr"), [("10.0.0.0", "10.0.0.0/31"), ("10.0.0.1", "10.0.0.0/31"),
                          ("10.0.0.7", "10.0.0.7/32"), ("10.0.0.254", CIDR)],
)  # fmt: skip
def test_point_to_point_networks_have_no_network_or_broadcast_address(
    address: str, cidr: str
) -> None:
    assert inventory_problems([node("a", address, cidr=cidr)]) == []


def test_a_cidr_with_a_zone_or_blanks_is_refused() -> None:
    (msg,) = inventory_problems([node("a", "fd00::1", cidr="fd00::%eth0/64")])
    assert msg.startswith("gpufleet_cluster_cidr='fd00::%eth0/64' has a zone")
    (msg,) = inventory_problems([node("a", "10.0.0.1", cidr="10.0.0.0/24 ")])
    assert msg.startswith("gpufleet_cluster_cidr='10.0.0.0/24 ' has leading or trailing")


@pytest.mark.parametrize("master", ["a ", " a", "a\t", "\u00a0a"])
def test_a_master_name_with_blanks_is_refused(master: str) -> None:
    nodes = [node("a", "10.0.0.1", master=master), node("b", "10.0.0.2", master=master)]
    (msg,) = inventory_problems(nodes)
    assert msg.startswith(f"gpufleet_master={master!r} has leading or trailing whitespace")
    assert "'a'" in msg


def test_an_ansible_host_with_blanks_is_refused() -> None:
    (msg,) = inventory_problems([node("a", None, ansible_host="h1 ")])
    assert msg.startswith("a: ansible_host='h1 ' has leading or trailing whitespace")
