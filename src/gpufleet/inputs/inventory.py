"""Input checks that run before any node is touched (playbooks/check_inventory.yml).

Two kinds, both pure functions over plain values (the standard library and the data of
gpufleet.inputs.known and gpufleet.inputs.addresses only):

- cluster-level checks of the inventory, which no single node can make: the group of GPU
  nodes is not empty, every node has its own address (a host address of the cluster
  network, in a form every node can use: no zone, not link-local IPv6, not the network's
  network or broadcast address), the rendezvous master is one of the nodes (written as
  the host is: no blanks around it), the cluster network is a CIDR and holds the nodes'
  addresses, the rendezvous port is a TCP port that no service of the nodes uses (not
  privileged, not a node's SSH port, not the probe's port), and the cluster-wide settings
  agree between nodes (:func:`inventory_problems`, :func:`check_inventory`);
- (the values of single variables, ranges included, are gpufleet.inputs.boundary's job).

Every message names the variable, the value given and what is allowed, e.g.
``gpufleet_cluster_address='10.0.0.5' is used by node1 and node2: every node needs its own
address``. The filter plugin ``gpufleet.core.inventory_problems`` (and friends) is the
Ansible side; :func:`nodes_from_hostvars` reads the inventory's hostvars into
:class:`InventoryNode` records.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.inputs import addresses, known

DEFAULT_GROUP = "gpu_nodes"
CIDR_ALLOWED = (
    "a network as ADDRESS/PREFIX, e.g. 10.0.0.0/24 (prefix 0-32 for IPv4, 0-128 for IPv6)"
)
PORT_ALLOWED = "an integer 1-65535"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_MAX_LISTED = 8


class InventoryError(RefusedError):
    """The inventory or a variable cannot work; the message lists every problem."""


@dataclass(frozen=True)
class InventoryNode:
    """What the cluster-level checks read from one host of the group (None = not set)."""

    name: str
    cluster_address: object = None
    ansible_host: object = None
    ansible_port: object = None
    master: object = None
    cidr: object = None
    rdzv_port: object = None
    probe_port: object = None


def show(value: object) -> str:
    """A value as the messages print it: strings quoted, everything else as Python shows it."""
    return repr(str(value)) if isinstance(value, str) else repr(value)


def _is_set(value: object) -> bool:
    return value is not None and not (isinstance(value, str) and not value.strip())


def _names(items: Iterable[str], conjunction: str = "and") -> str:
    """``a, b and c`` (``a, b or c``); long lists are cut after a few names."""
    listed = list(items)
    if len(listed) > _MAX_LISTED:
        return ", ".join(listed[:_MAX_LISTED]) + f", ... ({len(listed)} in all)"
    if len(listed) < 2:
        return ", ".join(listed)
    return ", ".join(listed[:-1]) + f" {conjunction} {listed[-1]}"


def as_int(value: object) -> int | None:
    """``value`` as an int when it is one (int, or a string of digits), else None.

    Booleans and non-integral floats are not integers here (``True`` is not a port).
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
        return int(value)
    return None


def as_number(value: object) -> float | None:
    """``value`` as a float when it is a number (or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


# --------------------------------------------------------------------------- the inventory


def _blank_ends(value: object) -> bool:
    return isinstance(value, str) and value != value.strip()


def _network(value: object) -> tuple[IPNetwork | None, str]:
    """(network, "") for a CIDR, else (None, message naming the value and what is allowed)."""
    name = "gpufleet_cluster_cidr"
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        return None, f"{name}={show(value)} is not a network -> allowed: {CIDR_ALLOWED}"
    if _blank_ends(value):
        return None, (
            f"{name}={show(value)} has leading or trailing whitespace -> allowed: "
            f"{CIDR_ALLOWED}, as {text!r}"
        )
    if "%" in text:
        return None, (
            f"{name}={show(value)} has a zone (%interface), which names an interface of one "
            f"node only -> allowed: {CIDR_ALLOWED}, without a zone"
        )
    if "/" not in text:
        return None, f"{name}={show(value)} has no prefix length -> allowed: {CIDR_ALLOWED}"
    try:
        return ipaddress.ip_network(text, strict=True), ""
    except ValueError:
        pass
    try:
        loose = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None, f"{name}={show(value)} is not a network -> allowed: {CIDR_ALLOWED}"
    return None, (
        f"{name}={show(value)} has host bits set -> allowed: the network address "
        f"{loose.with_prefixlen} (did you mean it?)"
    )


def _by_value(nodes: Sequence[InventoryNode], attr: str) -> dict[str, tuple[object, list[str]]]:
    """{value as text: (value, [nodes])} of one setting, over the nodes that set it."""
    seen: dict[str, tuple[object, list[str]]] = {}
    for n in nodes:
        value = getattr(n, attr)
        if _is_set(value):
            seen.setdefault(str(value).strip(), (value, []))[1].append(n.name)
    return seen


def inventory_problems(nodes: Sequence[InventoryNode], group: str = DEFAULT_GROUP) -> list[str]:
    """Every cluster-level problem of the inventory, one message each (empty: fine)."""
    if not nodes:
        return [
            f"the inventory group {group} has no hosts ({group}=[]) -> allowed: one or more "
            f"hosts under {group}, the GPU nodes to provision and verify"
        ]
    names = [n.name for n in nodes]
    out: list[str] = []

    # Cluster-wide settings: one value for the whole cluster.
    for attr, var in (
        ("cidr", "gpufleet_cluster_cidr"),
        ("master", "gpufleet_master"),
        ("rdzv_port", "gpufleet_rdzv_port"),
    ):
        values = _by_value(nodes, attr)
        if len(values) > 1:
            given = "; ".join(
                f"{var}={show(value)} on {_names(hosts)}" for value, hosts in values.values()
            )
            out.append(
                f"{var} differs between the nodes ({given}) -> allowed: one value for the "
                f"whole cluster; set it once for the group {group}"
            )

    # The cluster network (its checks need one valid value).
    cidrs = _by_value(nodes, "cidr")
    network: IPNetwork | None = None
    for value, _ in cidrs.values():
        parsed, problem = _network(value)
        if problem:
            out.append(problem)
        elif len(cidrs) == 1:
            network = parsed

    # The rendezvous port: a TCP port that no service of the nodes uses.
    for value, _ in _by_value(nodes, "rdzv_port").values():
        port = as_int(value)
        if port is None or not 1 <= port <= 65535:
            why = "is not an integer" if port is None else "is not a TCP port"
            out.append(
                f"gpufleet_rdzv_port={show(value)} {why} -> allowed: {PORT_ALLOWED} "
                "(torchrun's MASTER_PORT, default 29500)"
            )
            continue
        out += _port_clashes(value, port, nodes)

    # The rendezvous master: a host of the group, written as the host is.
    for text, (value, _) in _by_value(nodes, "master").items():
        if _blank_ends(value) and text in names:
            out.append(
                f"gpufleet_master={show(value)} has leading or trailing whitespace -> allowed: "
                f"the host name as written, {text!r}"
            )
        elif text not in names:
            out.append(
                f"gpufleet_master={show(value)} is not a host of {group} -> allowed: "
                f"{_names(names, 'or')} (or unset: the first host, {names[0]})"
            )

    # Each node's cluster address: an address, inside the network, its own.
    used: dict[IPAddress, list[str]] = {}
    for n in nodes:
        if not _is_set(n.cluster_address):
            continue
        why = addresses.form_problem(str(n.cluster_address))
        if why:
            out.append(
                f"{n.name}: gpufleet_cluster_address={show(n.cluster_address)} {why} -> "
                f"allowed: {addresses.ADDRESS_ALLOWED}"
            )
            continue
        addr = ipaddress.ip_address(str(n.cluster_address))
        used.setdefault(addr, []).append(n.name)
        # A one-node "cluster" on loopback (the shipped local inventory) stays on the machine.
        single_loopback = addr.is_loopback and len(nodes) == 1
        if network is not None and not single_loopback and addr not in network:
            out.append(
                f"{n.name}: gpufleet_cluster_address={show(str(addr))} is outside "
                f"gpufleet_cluster_cidr={show(network.with_prefixlen)} -> allowed: an address "
                f"inside {network.with_prefixlen}, or a gpufleet_cluster_cidr that holds it"
            )
        elif network is not None and (why := addresses.host_problem(addr, network)):
            out.append(
                f"{n.name}: gpufleet_cluster_address={show(n.cluster_address)} {why} -> "
                f"allowed: a host address inside {network.with_prefixlen} (not its network "
                "or broadcast address)"
            )
    for addr, hosts in used.items():
        if len(hosts) > 1:
            out.append(
                f"gpufleet_cluster_address={show(str(addr))} is used by {_names(hosts)}: every "
                "node needs its own address -> allowed: a distinct address per node"
            )

    # Nodes without a cluster address are reached, and verified, at ansible_host.
    endpoints: dict[tuple[str, str], list[str]] = {}
    for n in nodes:
        if _blank_ends(n.ansible_host) and _is_set(n.ansible_host):
            out.append(
                f"{n.name}: ansible_host={show(n.ansible_host)} has leading or trailing "
                f"whitespace -> allowed: the host name or address as written, "
                f"{str(n.ansible_host).strip()!r}"
            )
        if _is_set(n.cluster_address) or not _is_set(n.ansible_host):
            continue
        ssh_port = str(n.ansible_port).strip() if _is_set(n.ansible_port) else ""
        endpoints.setdefault((str(n.ansible_host).strip().lower(), ssh_port), []).append(n.name)
    for (host, ssh_port), hosts in endpoints.items():
        if len(hosts) > 1:
            at = f"ansible_host={show(host)}" + (f" (ansible_port={ssh_port})" if ssh_port else "")
            out.append(
                f"{at} is used by {_names(hosts)}, which set no gpufleet_cluster_address: every "
                "node needs its own address -> allowed: a distinct ansible_host per node, or a "
                "gpufleet_cluster_address per node"
            )
    return out


def _port_clashes(value: object, port: int, nodes: Sequence[InventoryNode]) -> list[str]:
    """The rendezvous port against the ports of the nodes' services: privileged ports, the
    well-known ports of the cluster's services, each node's SSH port (ansible_port) and the
    probe's port (verify_probe_port, where the inventory sets it)."""
    name = f"gpufleet_rdzv_port={show(value)}"
    allowed = (
        f"-> allowed: a port {known.PRIVILEGED_PORTS}-65535 that no service of the nodes uses "
        "(torchrun's MASTER_PORT, default 29500)"
    )
    if port in known.SERVICE_PORTS:
        return [f"{name} is the port of {known.SERVICE_PORTS[port]} {allowed}"]
    if port < known.PRIVILEGED_PORTS:
        return [
            f"{name} is a privileged port (below {known.PRIVILEGED_PORTS}), where the nodes' "
            f"system services listen {allowed}"
        ]
    out = []
    for attr, var, what in (
        ("ansible_port", "ansible_port", "the SSH port of"),
        ("probe_port", "verify_probe_port", "verify's probe port (it listens at the same time) on"),
    ):
        hosts = [n.name for n in nodes if as_int(getattr(n, attr)) == port]
        if hosts:
            out.append(
                f"{name} is {what} {_names(hosts)} ({var}={port}): ports must not clash "
                f"{allowed}, and not {var}"
            )
    return out


def check_inventory(nodes: Sequence[InventoryNode], group: str = DEFAULT_GROUP) -> None:
    """Raise InventoryError listing every problem of :func:`inventory_problems`."""
    problems = inventory_problems(nodes, group)
    if problems:
        raise InventoryError("\n".join(problems))


def nodes_from_hostvars(
    hostvars: Mapping[str, Mapping[str, Any]], hosts: Iterable[str]
) -> list[InventoryNode]:
    """InventoryNode records of ``hosts`` from Ansible's ``hostvars`` (inventory values)."""
    out = []
    for host in hosts:
        hv = hostvars[host]
        out.append(
            InventoryNode(
                name=str(host),
                cluster_address=hv.get("gpufleet_cluster_address"),
                ansible_host=hv.get("ansible_host"),
                ansible_port=hv.get("ansible_port"),
                master=hv.get("gpufleet_master"),
                cidr=hv.get("gpufleet_cluster_cidr"),
                rdzv_port=hv.get("gpufleet_rdzv_port"),
                probe_port=hv.get("verify_probe_port"),
            )
        )
    return out
