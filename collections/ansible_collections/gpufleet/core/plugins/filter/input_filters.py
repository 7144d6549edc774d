"""Input boundary filters: thin adapters over :mod:`gpufleet.inputs.boundary`.

``values | gpufleet.core.input_problems('torch_env', inventory_hostname)`` -> the list of
problems (each names the variable, the value and what is allowed); the check play fails on
a non-empty list before any change (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.inputs import boundary


def input_problems(values: Mapping[str, Any], role: str, host: str = "") -> list[str]:
    """Problems of ``role``'s variables at the input boundary ([] when all are fine)."""
    return boundary.input_problems(values, role, host)


def single_line(value: object, name: str, max_len: int = 1024) -> str:
    """``value | gpufleet.core.single_line('var')`` -> value, or an error naming var."""
    return boundary.single_line(value, name, max_len)


class FilterModule:
    """gpufleet.core input boundary filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return as_filters((input_problems, single_line), (boundary.BoundaryError,))
