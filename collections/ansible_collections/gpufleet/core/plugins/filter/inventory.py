"""Input filters for playbooks/check_inventory.yml and the roles' check_inputs entry points.

Thin adapters over :mod:`gpufleet.inventory` (imported from the controller venv that
``make setup`` builds). They return lists of messages (empty: fine) so a task can report
every problem at once; errors of the adapters themselves become ``AnsibleFilterError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    import_gpufleet,
)

inventory = import_gpufleet("inventory")


def inventory_problems(
    hostvars: Mapping[str, Any], hosts: Iterable[str] | None, group: str = "gpu_nodes"
) -> list[str]:
    """``hostvars | gpufleet.core.inventory_problems(groups['gpu_nodes'] | default([]))``."""
    nodes = inventory.nodes_from_hostvars(hostvars, list(hosts or []))
    return list(inventory.inventory_problems(nodes, group))


def range_problems(rows: Iterable[Mapping[str, Any]], node: str = "") -> list[str]:
    """``[{name, value, min, max, allowed, number}] | gpufleet.core.range_problems(host)``."""
    return list(inventory.range_problems(inventory.ranges_from_mappings(rows), node))


def verify_settings_problems(settings: Mapping[str, Any], node: str = "") -> list[str]:
    """``{verify_iters: ..., ...} | gpufleet.core.verify_settings_problems(host)``."""
    return list(inventory.verify_settings_problems(settings, node))


class FilterModule:
    """gpufleet.core input-check filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        funcs = (inventory_problems, range_problems, verify_settings_problems)
        return as_filters(funcs, (inventory.InventoryError, ValueError, TypeError, KeyError))
