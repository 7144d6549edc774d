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

from collections.abc import Sequence
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    filter_module,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.node import ib_ports as ibports
    from gpufleet.provisioning import fabric_packages as fabricpkg


def nvswitches_from_lspci(text: Any) -> list[str]:
    return fabricpkg.nvswitches_from_lspci(text or "")


def module_profiles(text: Any) -> dict[str, list[str]]:
    return fabricpkg.parse_module_profiles(str(text or ""))


def fabricmanager_exact_specs(names: Sequence[str], driver_version: str) -> list[str]:
    return fabricpkg.exact_specs(names, str(driver_version))


def fabricmanager_mismatches(
    installed: Sequence[str] | str, names: Sequence[str], driver_version: str
) -> list[str]:
    lines = installed.splitlines() if isinstance(installed, str) else list(installed)
    return fabricpkg.version_mismatches(lines, names, str(driver_version))


def ib_listing_raw(text: Any) -> dict[str, Any]:
    return ibports.raw_from_listing(str(text or ""))


# Registered as they are: the gpufleet functions take the filters' arguments unchanged
# (transaction_specs reads an empty ``installed`` as none).
FilterModule = filter_module(
    "gpufleet.core fabric and InfiniBand filters.",
    globals(),
    (ValueError, TypeError),
    direct={
        "fabric_needs": fabricpkg.fabric_needs,
        "fabricmanager_names": fabricpkg.fm_package_names,
        "fabricmanager_tx_specs": fabricpkg.transaction_specs,
        "nccl_ib_hca": ibports.nccl_ib_hca,
    },
)
