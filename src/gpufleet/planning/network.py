"""Cluster-network helpers for the cluster_network role (pure functions, stdlib only).

The role calls these through the filter plugins in the collection
(``plugins/filter/network_filters.py``); keeping the logic
here makes it unit-testable with plain facts dicts (the shape ``ansible.builtin.setup`` returns
under ``ansible_facts``, i.e. without the ``ansible_`` prefix).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.errors import RefusedError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Linux interface names: at most 15 bytes, no '/', no whitespace, not "." or "..".
_IFNAME = re.compile(r"^(?!\.{1,2}$)[^/\s:]{1,15}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class NetConfigError(RefusedError):
    """A network value that cannot be used (malformed CIDR, address not on this node...)."""


@dataclass(frozen=True)
class NodeAddress:
    """One address of one interface, as found in the node's facts."""

    interface: str
    address: str
    prefix: int
    family: int  # 4 or 6


def validated_cidr(text: object, *, name: str = "gpufleet_cluster_cidr") -> str:
    """Return ``text`` as a normalised network (``10.0.0.0/24``) or raise NetConfigError.

    Host bits set (``10.0.0.5/24``) are refused rather than silently masked: the value is
    the cluster's network and the message suggests the network address that was probably
    meant. A bare address is refused too (a cluster network has a prefix length).
    """
    if not isinstance(text, str) or not text.strip():
        raise NetConfigError(f"{name} must be a network in CIDR notation (e.g. 10.0.0.0/24)")
    value = text.strip()
    if "/" not in value:
        raise NetConfigError(
            f"{name}={value!r} has no prefix length; write the network as CIDR, e.g. 10.0.0.0/24"
        )
    try:
        network = ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise NetConfigError(
                f"{name}={value!r} is not a network in CIDR notation ({exc})"
            ) from None
        raise NetConfigError(
            f"{name}={value!r} has host bits set; did you mean {loose.with_prefixlen}?"
        ) from None
    return network.with_prefixlen


def validated_address(text: object, *, name: str = "gpufleet_cluster_address") -> str:
    """Return ``text`` as a normalised IP address (no prefix) or raise NetConfigError."""
    if not isinstance(text, str) or not text.strip():
        raise NetConfigError(f"{name} must be an IPv4 or IPv6 address")
    try:
        return str(ipaddress.ip_address(text.strip()))
    except ValueError:
        raise NetConfigError(f"{name}={text!r} is not an IPv4 or IPv6 address") from None


def address_in_cidr(address: str, cidr: str) -> bool:
    """True when ``address`` lies inside the network ``cidr`` (families must match)."""
    addr = ipaddress.ip_address(address.split("/", 1)[0])
    network = ipaddress.ip_network(cidr, strict=False)
    return addr.version == network.version and addr in network


def _iface_facts(facts: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    # setup stores interface facts under the interface name, with ':' (and on some
    # versions '-' and '.') replaced by '_'; the 'device' field keeps the real name.
    for key in (name, name.replace(":", "_"), re.sub(r"[-.:]", "_", name)):
        for candidate in (key, f"ansible_{key}"):
            value = facts.get(candidate)
            if isinstance(value, Mapping) and "device" in value:
                return value
    return None


def node_addresses(facts: Mapping[str, Any]) -> list[NodeAddress]:
    """Every IPv4/IPv6 address of the node, in a stable order.

    Order: the default-route interface first (IPv4 then IPv6), then the other interfaces
    sorted by name; within an interface the primary IPv4 address, its secondaries, then
    global IPv6 addresses. Link-local IPv6 addresses are left out (they cannot be a cluster
    address without a scope id).
    """
    names = facts.get("interfaces") or facts.get("ansible_interfaces") or []
    default_if = [
        str((facts.get(key) or {}).get("interface") or "")
        for key in ("default_ipv4", "default_ipv6")
    ]
    ordered = [n for n in dict.fromkeys(default_if) if n] + sorted(str(n) for n in names)
    seen: set[str] = set()
    out: list[NodeAddress] = []
    for name in ordered:
        iface = _iface_facts(facts, name)
        if iface is None:
            continue
        device = str(iface.get("device") or name)
        if device in seen:
            continue
        seen.add(device)
        v4 = []
        if isinstance(iface.get("ipv4"), Mapping):
            v4.append(iface["ipv4"])
        elif isinstance(iface.get("ipv4"), list):  # some platforms report a list
            v4.extend(x for x in iface["ipv4"] if isinstance(x, Mapping))
        v4.extend(x for x in iface.get("ipv4_secondaries") or [] if isinstance(x, Mapping))
        for entry in v4:
            address = entry.get("address")
            if not address:
                continue
            prefix = entry.get("prefix")
            if prefix is None and entry.get("netmask"):
                prefix = ipaddress.ip_network(f"0.0.0.0/{entry['netmask']}").prefixlen
            out.append(NodeAddress(device, str(address), int(prefix or 32), 4))
        for entry in iface.get("ipv6") or []:
            if not isinstance(entry, Mapping) or not entry.get("address"):
                continue
            address = str(entry["address"]).split("%", 1)[0]
            if ipaddress.ip_address(address).is_link_local:
                continue
            out.append(NodeAddress(device, address, int(entry.get("prefix") or 128), 6))
    return out


def cluster_address(facts: Mapping[str, Any], cidr: str) -> str:
    """The node's first address inside ``cidr`` (see node_addresses for the order), or ''."""
    network = ipaddress.ip_network(validated_cidr(cidr))
    for entry in node_addresses(facts):
        addr = ipaddress.ip_address(entry.address)
        if addr.version == network.version and addr in network:
            return str(addr)
    return ""


def interface_for_address(
    facts: Mapping[str, Any], address: str, allow_loopback: bool = False
) -> str:
    """Name of the interface that carries ``address`` on this node.

    Raises NetConfigError when no interface carries it (the address is not this node's,
    or facts were gathered without the network subset) or when only loopback does (NCCL
    over ``lo`` cannot reach other nodes) unless ``allow_loopback`` (a one-node cluster).
    """
    wanted = ipaddress.ip_address(validated_address(address))
    matches = [
        e.interface for e in node_addresses(facts) if ipaddress.ip_address(e.address) == wanted
    ]
    if not matches:
        known = ", ".join(f"{e.interface}={e.address}" for e in node_addresses(facts)) or "none"
        raise NetConfigError(
            f"no interface of this node carries the cluster address {address} "
            f"(addresses found: {known}); set gpufleet_cluster_address to one of them, "
            "or cluster_network_interface to the interface name"
        )
    name = matches[0]
    iface = _iface_facts(facts, name) or {}
    if not allow_loopback and (name == "lo" or iface.get("type") == "loopback"):
        raise NetConfigError(
            f"the cluster address {address} is on the loopback interface {name}; other "
            "nodes cannot reach it. Use an address of a real network interface (loopback "
            "is accepted only when the cluster has a single node)."
        )
    return name


def validated_ifname(text: object, *, name: str = "cluster_network_interface") -> str:
    """A Linux interface name (1-15 bytes, no '/', ':' or whitespace) or NetConfigError."""
    if not isinstance(text, str) or not _IFNAME.match(text):
        raise NetConfigError(f"{name}={text!r} is not a valid network interface name")
    return text


def firewall_sources(addresses: Iterable[str]) -> list[str]:
    """Distinct, validated, sorted firewall source entries (addresses or networks)."""
    out: set[IPAddress | IPNetwork] = set()
    for raw in addresses:
        text = str(raw).strip()
        try:
            value: IPAddress | IPNetwork = (
                ipaddress.ip_network(text, strict=True)
                if "/" in text
                else ipaddress.ip_address(text)
            )
        except ValueError:
            raise NetConfigError(f"{text!r} is not a valid firewall source") from None
        out.add(value)
    return [str(v) for v in sorted(out, key=lambda v: (v.version, str(v)))]


def env_file_lines(values: Mapping[str, object]) -> list[str]:
    """``KEY=value`` lines for an environment file that shells and systemd both read.

    Values are refused when they would need quoting (whitespace, quotes, '$', backslash,
    newline): every value gpufleet writes is a name, an address, a number or a list with
    commas, so a value that needs quoting is a mistake in the inventory.
    """
    lines = []
    for key, raw in values.items():
        if not _ENV_NAME.match(key):
            raise NetConfigError(f"{key!r} is not a valid environment variable name")
        value = str(raw)
        if re.search(r"[\s'\"$`\\;&|<>()]", value):
            raise NetConfigError(f"value of {key} ({value!r}) must not need shell quoting")
        lines.append(f"{key}={value}")
    return lines


def peer_addresses(hostvars: Mapping[str, Any], hosts: Iterable[str], cidr: str) -> dict[str, Any]:
    """Cluster address of each host: its ``gpufleet_cluster_address`` when set, else derived
    from its gathered facts. Returns ``{"addresses": {host: address}, "missing": [host]}``;
    a host is missing when it has neither (unreachable, or facts not gathered yet).
    """
    found: dict[str, str] = {}
    missing: list[str] = []
    for host in hosts:
        hv = hostvars[host]
        explicit = hv.get("gpufleet_cluster_address") if hasattr(hv, "get") else None
        if explicit:
            found[host] = validated_address(
                str(explicit), name=f"gpufleet_cluster_address of {host}"
            )
            continue
        facts = hv.get("ansible_facts") if hasattr(hv, "get") else None
        address = cluster_address(facts, cidr) if facts and facts.get("interfaces") else ""
        if address:
            found[host] = address
        else:
            missing.append(host)
    return {"addresses": found, "missing": missing}


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """KEY=VALUE lines (``export`` and quotes allowed, # comments), as in /etc/gpufleet/nccl.env."""
    env: dict[str, str] = {}
    p = Path(path)
    if not p.is_file():
        return env
    for raw in p.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env
