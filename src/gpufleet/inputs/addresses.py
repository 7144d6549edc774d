"""Address forms a cluster address may not take (stdlib only: gpufleet.inputs.inventory and
gpufleet.inputs.rules share it).

A node's cluster address is what the other nodes connect to (torchrun's rendezvous, NCCL,
the probe) and what the firewall opens: an address with a zone (``fe80::1%eth0``) names an
interface of one node only, an IPv6 link-local address needs such a zone, and the network
or broadcast address of the cluster network is no host's address.
"""

from __future__ import annotations

import ipaddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

ADDRESS_ALLOWED = (
    "the node's IPv4 or IPv6 address on the cluster network, e.g. 10.0.0.11 (no prefix, no "
    "%zone; not IPv6 link-local, multicast or unspecified)"
)


def form_problem(text: str) -> str:
    """Why ``text`` cannot be a node's cluster address ("" when it can)."""
    if text != text.strip():
        return "has leading or trailing whitespace"
    if "%" in text:
        return "has a zone (%interface), which names an interface of one node only"
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return "is not an IP address"
    if addr.is_unspecified:
        return "is the unspecified address (any address)"
    if addr.is_multicast:
        return "is a multicast address"
    if addr.version == 6 and addr.is_link_local:
        return "is an IPv6 link-local address, which works only with a zone of one node"
    return ""


def host_problem(addr: IPAddress, network: IPNetwork | None) -> str:
    """Why ``addr`` cannot be a host of ``network`` ("" when it can, or when it lies outside
    it): the network address, or the broadcast address of an IPv4 network. Prefixes /31
    and /32 (/127 and /128) have neither (RFC 3021)."""
    if network is None or addr.version != network.version or addr not in network:
        return ""
    if network.prefixlen >= network.max_prefixlen - 1:
        return ""
    if addr == network.network_address:
        return f"is the network address of {network.with_prefixlen}, no host's address"
    if network.version == 4 and addr == network.broadcast_address:
        return f"is the broadcast address of {network.with_prefixlen}, no host's address"
    return ""
