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
    from gpufleet import units
    from gpufleet.inputs import boundary, credentials


def input_problems(values: Mapping[str, Any], role: str, host: str = "") -> list[str]:
    """Problems of ``role``'s variables at the input boundary ([] when all are fine)."""
    return boundary.input_problems(values, role, host)


def single_line(value: object, name: str, max_len: int = 1024) -> str:
    """``value | gpufleet.core.single_line('var')`` -> value, or an error naming var."""
    return boundary.single_line(value, name, max_len)


def url_credentials(url: object) -> dict[str, str | bool]:
    """``url | gpufleet.core.url_credentials`` -> {url (without user:password@), username,
    password (both percent-decoded), present}: what a dnf repository or a download takes
    apart (tasks that use username/password are no_log)."""
    return credentials.split(str(url or "")).as_dict()


def timespan_seconds(value: object) -> float:
    """``'5min' | gpufleet.core.timespan_seconds`` -> 300.0: a systemd time span in seconds
    (gpufleet.units.parse_timespan; the check play refuses one that is not)."""
    return units.parse_timespan(value)


def signing_key_location(url: object, name: str) -> str:
    """``key_url | gpufleet.core.signing_key_location(name)`` -> where a repository file finds
    its signing key: the local copy (roles/gpufleet_common/tasks/signing_key.yml) when the URL
    carries credentials, else the URL itself."""
    text = str(url or "")
    if credentials.split(text).present:
        return f"file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpufleet-{name}"
    return text


class FilterModule:
    """gpufleet.core input boundary filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return as_filters(
            (input_problems, single_line, url_credentials, signing_key_location, timespan_seconds),
            (boundary.BoundaryError, ValueError),
        )
