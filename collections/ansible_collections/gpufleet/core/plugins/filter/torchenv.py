"""torch_env filters: the torch build to install and its source, the lock check, mirror URL
checks, manifest read/merge.

Thin adapters over :mod:`gpufleet.provisioning.node_env`, :mod:`~gpufleet.planning.torch_source`
and :mod:`~gpufleet.planning.torch_lock` (imported from the controller venv that ``make
setup`` builds); errors become ``AnsibleFilterError`` naming the variable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    filter_module,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.planning import torch_lock as torchlock
    from gpufleet.planning import torch_source as torchsource
    from gpufleet.provisioning import node_env as nodeenv


def torch_install(
    plan: Mapping[str, Any], variant: str, settings: Mapping[str, Any]
) -> dict[str, Any]:
    """``gpufleet_plan | gpufleet.core.torch_install(variant, settings)`` -> the torch step
    (source, index_url, requirement, build, cuda, nccl; the pin is empty for a wheelhouse
    until the node's find-links are read). ``settings``: source, index_url, find_links,
    index_root (torch_env's variables)."""
    spec = torchsource.SourceSettings.from_mapping(settings)
    return torchsource.torch_install(plan, variant, spec).as_dict()


def torch_lock_problems(
    text: str,
    install: Mapping[str, Any],
    python: str,
    packages: Iterable[str],
    where: str,
) -> list[str]:
    """``lock_text | gpufleet.core.torch_lock_problems(install, python, packages, where)``
    -> how the lock fails the torch step ([] = it serves it; a lock that cannot be read is
    one problem)."""
    try:
        lock = torchlock.parse(str(text), where)
    except torchlock.LockError as exc:
        return [str(exc)]
    return torchlock.lock_problems(lock, install, str(python), list(packages), where)


def check_url(url: str, name: str, allow_path: bool = False) -> bool:
    """``url | gpufleet.core.check_url('var_name')`` -> True, or an error naming var_name.

    Returns a boolean so that it can stand in an ``assert`` (ansible-core 2.19 requires
    conditionals to be booleans).
    """
    nodeenv.check_url(url, name=name, allow_path=allow_path)
    return True


def has_credentials(url: str) -> bool:
    """``url | gpufleet.core.has_credentials`` -> True when it carries user:password@."""
    return nodeenv.has_credentials(url)


def redact_url(url: str) -> str:
    """``url | gpufleet.core.redact_url`` -> url with credentials replaced by ***."""
    return torchsource.redact_url(url)


def untrusted_http_hosts(urls: Iterable[str], trusted: Iterable[str]) -> list[str]:
    """``urls | gpufleet.core.untrusted_http_hosts(trusted)`` -> plain-HTTP hosts to trust."""
    return nodeenv.untrusted_http_hosts(urls, trusted)


def manifest_merge(existing: object, updates: Mapping[str, Any], now: str) -> dict[str, Any]:
    """``old | gpufleet.core.manifest_merge(updates, now)`` -> manifest to write."""
    return nodeenv.merge_manifest(existing, updates, now)


def manifest_read(content_b64: object, path: str, node: str) -> dict[str, Any]:
    """``slurped.content | gpufleet.core.manifest_read(path, node)`` -> {data, error}."""
    return nodeenv.read_manifest(content_b64, path, node)


FilterModule = filter_module(
    "gpufleet.core torch_env filters.",
    globals(),
    (nodeenv.EnvConfigError, ValueError, TypeError),
)
