"""Input filters for playbooks/check_inventory.yml and the roles' check_inputs entry points.

Thin adapters over :mod:`gpufleet.inputs.inventory` (imported from the controller venv that
``make setup`` builds). They return lists of messages (empty: fine) so a task can report
every problem at once; errors of the adapters themselves become ``AnsibleFilterError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.inputs import inventory


def inventory_problems(
    hostvars: Mapping[str, Any], hosts: Iterable[str] | None, group: str = "gpu_nodes"
) -> list[str]:
    """``hostvars | gpufleet.core.inventory_problems(groups['gpu_nodes'] | default([]))``."""
    nodes = inventory.nodes_from_hostvars(hostvars, list(hosts or []))
    return list(inventory.inventory_problems(nodes, group))


class FilterModule:
    """gpufleet.core input-check filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        funcs = (inventory_problems,)
        return as_filters(funcs, (inventory.InventoryError, ValueError, TypeError, KeyError))
