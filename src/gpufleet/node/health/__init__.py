"""Verdicts of the node checks: NVML readings + thresholds → :class:`gpufleet.results.Record`.

The verdicts are pure functions: no I/O, no NVML, no torch. Every failing or warning record
names the GPU (index + PCI bus id), the value seen, the threshold, and the fix (``remedy``);
the ``message`` says all of it in one paragraph.

One module per check family: :mod:`~gpufleet.node.health.driver` (driver and node),
:mod:`~gpufleet.node.health.memory` (ECC, page retirement, row remap),
:mod:`~gpufleet.node.health.links` (PCIe, NVLink, clocks), :mod:`~gpufleet.node.health.kernel_log`
(Xid), :mod:`~gpufleet.node.health.pytorch` (torch, NCCL, toolkit),
:mod:`~gpufleet.node.health.provisioned` (manifest, env python, nccl.env),
:mod:`~gpufleet.node.health.system_profile` (the node against its profile) and
:mod:`~gpufleet.node.health.host_copy` (host<->device copy against the profile's floor);
check names live in :mod:`~gpufleet.node.health.names`. This package re-exports the verdicts
(``health.pcie_link``).

The wiring, imported by name (it reads the node, and gpufleet.node.nvswitch imports this
package): :mod:`~gpufleet.node.health.check_registry` lists every node check once (name, tiers,
judge), :mod:`~gpufleet.node.health.context` gathers what the judges read,
:mod:`~gpufleet.node.health.pcie_load` loads idle GPUs to re-check their PCIe link,
:mod:`~gpufleet.node.health.host_copy_bench` measures a GPU's copy bandwidth with torch.

Thresholds and their sources:

* DCGM 4.6 diag level 1 (https://github.com/NVIDIA/DCGM, ``nvvs/src/Software.cpp``,
  ``common/DcgmGPUHardwareLimits.h``): persistence mode on; any pending page retirement
  fails; >= 63 retired pages fails; pending row remap or remap failure fails; >= 512
  uncorrectable remapped rows fails.
* azurehpc-health-checks (https://github.com/Azure/azurehpc-health-checks): any volatile
  uncorrectable (SRAM) ECC error fails (``check_gpu_ecc``); every present NVLink active
  (``check_nvlink_status``); clock event reasons other than idle / SW power cap are
  problems (``check_gpu_clock_throttling``); critical Xid list and 2 h window
  (``check_gpu_xid``, see :mod:`gpufleet.node.xid`).
"""

from __future__ import annotations

from gpufleet.node.health import names
from gpufleet.node.health._common import (
    NO_DRIVER_REASON,
    gpu_unreadable,
    no_driver,
    no_gpus,
    version_tuple,
)
from gpufleet.node.health.driver import (
    cuda_driver_version,
    driver_loaded,
    driver_version,
    gpu_count,
    nouveau,
    persistence_mode,
)
from gpufleet.node.health.host_copy import host_device_copy
from gpufleet.node.health.kernel_log import (
    XID_BUCKETS,
    XidBucket,
    kernel_log_unreadable,
    xid_bucket,
    xid_errors,
)
from gpufleet.node.health.links import (
    CLOCK_APP_CLOCKS_SETTING,
    CLOCK_DISPLAY_CLOCK,
    CLOCK_GPU_IDLE,
    CLOCK_HW_POWER_BRAKE,
    CLOCK_HW_SLOWDOWN,
    CLOCK_HW_THERMAL,
    CLOCK_REASON_NAMES,
    CLOCK_REASONS_FAIL,
    CLOCK_REASONS_WARN,
    CLOCK_SW_POWER_CAP,
    CLOCK_SW_THERMAL,
    CLOCK_SYNC_BOOST,
    PCIE_IDLE_UTILIZATION,
    clock_event_reasons,
    clock_reason_names,
    nvlink,
    pcie_link,
)
from gpufleet.node.health.memory import (
    DCGM_RETIRED_PAGES_LIMIT,
    DCGM_UNCORRECTABLE_REMAPS_LIMIT,
    VOLATILE_UNCORRECTABLE_LIMIT,
    ecc_mode,
    ecc_uncorrectable,
    page_retirement,
    row_remap,
)
from gpufleet.node.health.names import *  # noqa: F403  (the record names, names.__all__)
from gpufleet.node.health.pytorch import (
    cuda_visible_devices,
    nccl_version,
    toolkit,
    toolkit_from_plan,
    torch_arch,
    torch_cuda_available,
    torch_cuda_version,
    torch_device_count,
)

__all__ = [
    "CLOCK_APP_CLOCKS_SETTING",
    "CLOCK_DISPLAY_CLOCK",
    "CLOCK_GPU_IDLE",
    "CLOCK_HW_POWER_BRAKE",
    "CLOCK_HW_SLOWDOWN",
    "CLOCK_HW_THERMAL",
    "CLOCK_REASONS_FAIL",
    "CLOCK_REASONS_WARN",
    "CLOCK_REASON_NAMES",
    "CLOCK_SW_POWER_CAP",
    "CLOCK_SW_THERMAL",
    "CLOCK_SYNC_BOOST",
    "DCGM_RETIRED_PAGES_LIMIT",
    "DCGM_UNCORRECTABLE_REMAPS_LIMIT",
    "NO_DRIVER_REASON",
    "PCIE_IDLE_UTILIZATION",
    "VOLATILE_UNCORRECTABLE_LIMIT",
    "XID_BUCKETS",
    "XidBucket",
    "clock_event_reasons",
    "clock_reason_names",
    "cuda_driver_version",
    "cuda_visible_devices",
    "driver_loaded",
    "driver_version",
    "ecc_mode",
    "ecc_uncorrectable",
    "gpu_count",
    "gpu_unreadable",
    "host_device_copy",
    "kernel_log_unreadable",
    "nccl_version",
    "no_driver",
    "no_gpus",
    "nouveau",
    "nvlink",
    "page_retirement",
    "pcie_link",
    "persistence_mode",
    "row_remap",
    "toolkit",
    "toolkit_from_plan",
    "torch_arch",
    "torch_cuda_available",
    "torch_cuda_version",
    "torch_device_count",
    "version_tuple",
    "xid_bucket",
    "xid_errors",
]
__all__ += names.__all__
