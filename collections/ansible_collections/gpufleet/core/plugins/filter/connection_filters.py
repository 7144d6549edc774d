"""Connection-variable filter for playbooks/check_inventory.yml.

A thin adapter over :mod:`gpufleet.inputs.connection`: the ssh options in a node's
connection variables that run a command on the controller (ProxyCommand, LocalCommand,
PermitLocalCommand=yes), as warnings. gpufleet trusts these variables as Ansible does
(docs/security.md); the check play prints the warnings and goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.inputs import connection


def connection_warnings(hostvars: Mapping[str, Any], hosts: Iterable[str] | None) -> list[str]:
    """``hostvars | gpufleet.core.connection_warnings([inventory_hostname])``."""
    return connection.connection_warnings(hostvars, list(hosts or []))


class FilterModule:
    """gpufleet.core connection-variable filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return as_filters((connection_warnings,), (KeyError, TypeError))
