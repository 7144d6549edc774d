"""NVSwitch / InfiniBand filters for preflight, nvidia_driver, infiniband and cluster_network.

gpufleet.core.nvswitches_from_lspci   `lspci -nn -d 10de:` text -> NVSwitch PCI addresses
gpufleet.core.fabric_needs            (nvswitches, gpu archs, fm, nvlsm settings) ->
                                      {nvswitches, nvlink5, fabricmanager, nvlsm, reason}
gpufleet.core.module_profiles         `dnf module info --profile` text -> {profile: [rpms]}
gpufleet.core.fabricmanager_names     (el major, profiles, override) -> package names
gpufleet.core.fabricmanager_tx_specs  (el major, names, branch, nvlsm names, installed
                                      driver version) -> specs of the driver's own transaction
gpufleet.core.fabricmanager_exact_specs  (names, driver version) -> NAME-VERSION specs
gpufleet.core.fabricmanager_mismatches   (rpm lines, names, driver version) -> problems
gpufleet.core.ib_listing_raw          the roles' sysfs listing -> {hca: {port: {file: text}}}
gpufleet.core.nccl_ib_hca             that raw form -> active InfiniBand ports for NCCL_IB_HCA

Thin adapters over gpufleet.provisioning.fabric_packages and gpufleet.node.ib_ports (controller
venv, `make setup`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.node import ib_ports as ibports
    from gpufleet.provisioning import fabric_packages as fabricpkg


def nvswitches_from_lspci(text: Any) -> list[str]:
    return fabricpkg.nvswitches_from_lspci(text or "")


def fabric_needs(
    switches: Sequence[str] | None,
    gpu_archs: Sequence[str] | None = (),
    fabricmanager: object = "auto",
    nvlsm: object = "auto",
) -> dict[str, Any]:
    return fabricpkg.fabric_needs(switches, gpu_archs, fabricmanager, nvlsm)


def module_profiles(text: Any) -> dict[str, list[str]]:
    return fabricpkg.parse_module_profiles(str(text or ""))


def fabricmanager_names(
    el_major: int | str,
    profiles: Mapping[str, Sequence[str]] | None = None,
    override: Sequence[str] | None = None,
) -> list[str]:
    return fabricpkg.fm_package_names(el_major, profiles, override)


def fabricmanager_tx_specs(
    el_major: int | str,
    names: Sequence[str],
    branch: str | None,
    nvlsm: Sequence[str] = (),
    installed: str | None = None,
) -> list[str]:
    return fabricpkg.transaction_specs(el_major, names, branch, nvlsm, installed or None)


def fabricmanager_exact_specs(names: Sequence[str], driver_version: str) -> list[str]:
    return fabricpkg.exact_specs(names, str(driver_version))


def fabricmanager_mismatches(
    installed: Sequence[str] | str, names: Sequence[str], driver_version: str
) -> list[str]:
    lines = installed.splitlines() if isinstance(installed, str) else list(installed)
    return fabricpkg.version_mismatches(lines, names, str(driver_version))


def ib_listing_raw(text: Any) -> dict[str, Any]:
    return ibports.raw_from_listing(str(text or ""))


def nccl_ib_hca(raw: Mapping[str, Any], link_layer: str = "InfiniBand") -> list[str]:
    return ibports.nccl_ib_hca(raw, link_layer)


class FilterModule:
    """gpufleet.core fabric and InfiniBand filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        funcs = (
            nvswitches_from_lspci,
            fabric_needs,
            module_profiles,
            fabricmanager_names,
            fabricmanager_tx_specs,
            fabricmanager_exact_specs,
            fabricmanager_mismatches,
            ib_listing_raw,
            nccl_ib_hca,
        )
        return as_filters(funcs, (ValueError, TypeError))
