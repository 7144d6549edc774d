"""Cluster-network filters for the cluster_network role.

Thin adapters over :mod:`gpufleet.planning.network` (imported from the controller venv that
``make setup`` builds); every error is re-raised as ``AnsibleFilterError`` so the task
fails with the message that names the variable to fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    filter_module,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.planning import network as netcfg


def cidr(value: str, name: str = "gpufleet_cluster_cidr") -> str:
    """``'10.0.0.0/24' | gpufleet.core.cidr`` -> normalised network or error."""
    return netcfg.validated_cidr(value, name=name)


def address_in_cidr(address: str, network: str) -> bool:
    """``addr | gpufleet.core.address_in_cidr(cidr)``."""
    return netcfg.address_in_cidr(address, network)


def cluster_address(facts: Mapping[str, Any], network: str) -> str:
    """``ansible_facts | gpufleet.core.cluster_address(cidr)`` -> first address or ''."""
    return netcfg.cluster_address(facts, network)


def interface_for_address(
    facts: Mapping[str, Any], address: str, allow_loopback: bool = False
) -> str:
    """``ansible_facts | gpufleet.core.interface_for_address(addr)`` -> interface name."""
    return netcfg.interface_for_address(facts, address, allow_loopback)


def node_addresses(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``ansible_facts | gpufleet.core.node_addresses`` -> [{interface, address, ...}]."""
    return [asdict(a) for a in netcfg.node_addresses(facts)]


def firewall_sources(values: Iterable[str]) -> list[str]:
    """``addresses | gpufleet.core.firewall_sources`` -> sorted distinct sources."""
    return netcfg.firewall_sources(values)


def env_file_lines(values: Mapping[str, object]) -> list[str]:
    """``dict | gpufleet.core.env_file_lines`` -> ``KEY=value`` lines (validated)."""
    return netcfg.env_file_lines(values)


def peer_addresses(
    hostvars: Mapping[str, Any], hosts: Iterable[str], network: str
) -> dict[str, Any]:
    """``hostvars | gpufleet.core.peer_addresses(groups.gpu_nodes, cidr)``."""
    return netcfg.peer_addresses(hostvars, hosts, network)


FilterModule = filter_module(
    "gpufleet.core network filters.", globals(), (netcfg.NetConfigError, ValueError, TypeError)
)
