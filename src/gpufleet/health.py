"""Verdicts of the node checks: NVML readings + thresholds → :class:`gpufleet.results.Record`.

Pure functions: no I/O, no NVML, no torch. Every failing or warning record names the GPU
(index + PCI bus id), the value seen, the threshold, and the fix (``remedy``); the
``message`` says all of it in one paragraph.

Thresholds and their sources (see /work/shared/reference/validation.md):

* DCGM 4.6 diag level 1 (``nvvs/src/Software.cpp``, ``common/DcgmGPUHardwareLimits.h``):
  persistence mode on; any pending page retirement fails; >= 63 retired pages fails;
  pending row remap or remap failure fails; >= 512 uncorrectable remapped rows fails.
* azurehpc-health-checks: any volatile uncorrectable (SRAM) ECC error fails
  (``check_gpu_ecc``); every present NVLink active (``check_nvlink_status``); clock event
  reasons other than idle / SW power cap are problems (``check_gpu_clock_throttling``);
  critical Xid list and 2 h window (``check_gpu_xid``, see :mod:`gpufleet.xid`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from gpufleet.nodefacts import TorchFacts
from gpufleet.nvml import (
    NVML_ERROR_REMEDY,
    GpuReading,
    NodeReading,
    NvmlUnavailable,
    cuda_int_to_str,
)
from gpufleet.results import Record, Status
from gpufleet.xid import XidEvent, pci_key

# ---------------------------------------------------------------- thresholds (named, sourced)
#: DCGM: fail when retired pages (single-bit + double-bit) reach this many.
DCGM_RETIRED_PAGES_LIMIT = 63
#: DCGM: fail when uncorrectable remapped rows reach this many.
DCGM_UNCORRECTABLE_REMAPS_LIMIT = 512
#: azurehpc-health-checks check_gpu_ecc: any uncorrectable (volatile) error fails.
VOLATILE_UNCORRECTABLE_LIMIT = 0

# Clock event reasons (nvml.h nvmlClocksEventReason*; pynvml same names).
CLOCK_GPU_IDLE = 0x1
CLOCK_APP_CLOCKS_SETTING = 0x2
CLOCK_SW_POWER_CAP = 0x4
CLOCK_HW_SLOWDOWN = 0x8
CLOCK_SYNC_BOOST = 0x10
CLOCK_SW_THERMAL = 0x20
CLOCK_HW_THERMAL = 0x40
CLOCK_HW_POWER_BRAKE = 0x80
CLOCK_DISPLAY_CLOCK = 0x100

CLOCK_REASON_NAMES: Mapping[int, str] = {
    CLOCK_GPU_IDLE: "GPU idle",
    CLOCK_APP_CLOCKS_SETTING: "applications clocks setting",
    CLOCK_SW_POWER_CAP: "SW power cap",
    CLOCK_HW_SLOWDOWN: "HW slowdown",
    CLOCK_SYNC_BOOST: "sync boost",
    CLOCK_SW_THERMAL: "SW thermal slowdown",
    CLOCK_HW_THERMAL: "HW thermal slowdown",
    CLOCK_HW_POWER_BRAKE: "HW power brake slowdown",
    CLOCK_DISPLAY_CLOCK: "display clock setting",
}
#: Hardware-asserted slowdowns: the GPU is not delivering its clocks → fail.
CLOCK_REASONS_FAIL = CLOCK_HW_SLOWDOWN | CLOCK_HW_THERMAL | CLOCK_HW_POWER_BRAKE
#: Software limits worth a look (azurehpc warns on every reason but idle / SW power cap;
#: we warn on the power cap too, since it caps a training job's clocks) → warn.
CLOCK_REASONS_WARN = CLOCK_SW_POWER_CAP | CLOCK_SW_THERMAL

#: GPU utilisation (percent) at or below which a downshifted PCIe link counts as idle.
PCIE_IDLE_UTILIZATION = 0

NO_DRIVER_REASON = "no NVIDIA driver"

# Check names (the JSON record names; the pytest functions are test_<name>).
DRIVER_LOADED = "driver_loaded"
DRIVER_VERSION = "driver_version"
CUDA_DRIVER_VERSION = "cuda_driver_version"
NOUVEAU = "nouveau_not_loaded"
GPU_COUNT = "gpu_count"
PERSISTENCE = "persistence_mode"
ECC_MODE = "ecc_mode"
ECC_UNCORRECTABLE = "ecc_uncorrectable_volatile"
PAGE_RETIREMENT = "page_retirement"
ROW_REMAP = "row_remap"
PCIE_LINK = "pcie_link"
NVLINK = "nvlink"
CLOCK_EVENTS = "clock_event_reasons"
XID = "xid_errors"
TORCH_CUDA = "torch_cuda_available"
TORCH_COUNT = "torch_device_count"
TORCH_ARCH = "torch_arch_list"
TORCH_CUDA_VERSION = "torch_cuda_version"
NCCL_VERSION = "nccl_version"
VISIBLE_DEVICES = "cuda_visible_devices"
TOOLKIT = "cuda_toolkit"


# ---------------------------------------------------------------- helpers


def version_tuple(text: str) -> tuple[int, ...]:
    """ "535.104.05" → (535, 104, 5); "12.8" → (12, 8). Non-numeric tails are ignored."""
    parts: list[int] = []
    for piece in text.strip().split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m[0]))
    return tuple(parts)


def _rec(
    name: str,
    status: Status,
    message: str,
    *,
    gpu: GpuReading | None = None,
    value: object = None,
    threshold: object = None,
    remedy: str = "",
) -> Record:
    text = f"GPU {gpu.label}: {message}" if gpu is not None else message
    if remedy and status in ("fail", "warn"):
        text = f"{text} Fix: {remedy}"
    return Record(
        name=name,
        status=status,
        value=value,
        threshold=threshold,
        remedy=remedy if status in ("fail", "warn") else "",
        message=text,
        gpu=None if gpu is None else gpu.label,
    )


def no_driver(
    name: str, err: NvmlUnavailable, require_gpu: bool, gpu_label: str | None = None
) -> Record:
    """The verdict of any GPU check on a node where NVML cannot start."""
    if err.no_driver and not require_gpu:
        return Record(
            name=name,
            status="skip",
            message=f"{NO_DRIVER_REASON} ({err.text})",
            value=err.code,
            gpu=gpu_label,
        )
    why = "require_gpu is true" if err.no_driver else "the driver is installed but broken"
    return Record(
        name=name,
        status="fail",
        message=f"{NO_DRIVER_REASON if err.no_driver else 'NVML unavailable'}: {err.text} "
        f"(NVML error {err.code}); {why}. Fix: {err.remedy}",
        value=err.code,
        threshold="NVML initialises",
        remedy=err.remedy,
        gpu=gpu_label,
    )


def no_gpus(name: str, require_gpu: bool) -> Record:
    """The verdict of a per-GPU check when the driver sees no GPU at all."""
    if not require_gpu:
        return Record(name=name, status="skip", message="no NVIDIA GPU visible to NVML", value=0)
    return Record(
        name=name,
        status="fail",
        message="the NVIDIA driver is loaded but NVML sees no GPU; require_gpu is true. "
        "Fix: check `lspci -d 10de:`, `journalctl -k | grep -i nvrm`, and Xid 79",
        value=0,
        threshold="> 0",
        remedy="check `lspci -d 10de:` and the kernel log (Xid 79: GPU fell off the bus)",
    )


def gpu_unreadable(name: str, gpu: GpuReading) -> Record | None:
    """Fail when NVML could not read this GPU (e.g. GPU lost); None when it could."""
    if gpu.error is None:
        return None
    remedy = NVML_ERROR_REMEDY.get(
        gpu.error_code or -1, "inspect `nvidia-smi -q -i <gpu>` and the kernel log"
    )
    return _rec(
        name, "fail", f"NVML cannot read this GPU: {gpu.error}.", gpu=gpu,
        value=gpu.error_code, threshold="readable", remedy=remedy,
    )  # fmt: skip


def _unsupported(name: str, gpu: GpuReading, what: str) -> Record:
    return _rec(
        name,
        "skip",
        f"{what} not supported on this GPU ({gpu.name or 'unknown model'})",
        gpu=gpu,
    )


# ---------------------------------------------------------------- driver and node


def driver_loaded(reading: NodeReading) -> Record:
    return _rec(
        DRIVER_LOADED,
        "pass",
        f"NVML initialised: driver {reading.driver_version}, {len(reading.gpus)} GPU(s)",
        value=reading.driver_version,
    )


def driver_version(reading: NodeReading, min_driver: str | None) -> Record:
    if not min_driver:
        return _rec(
            DRIVER_VERSION, "skip",
            f"no plan driver floor to compare with (driver {reading.driver_version}); "
            "pass --min-driver or provision with a manifest",
            value=reading.driver_version,
        )  # fmt: skip
    ok = version_tuple(reading.driver_version) >= version_tuple(min_driver)
    return _rec(
        DRIVER_VERSION,
        "pass" if ok else "fail",
        f"driver {reading.driver_version} "
        + (f">= {min_driver}" if ok else f"is older than the plan's floor {min_driver}."),
        value=reading.driver_version,
        threshold=f">= {min_driver}",
        remedy=f"install a driver >= {min_driver} (role nvidia_driver; plan driver_branch)",
    )


def cuda_driver_version(reading: NodeReading, wheel_cuda: str | None) -> Record:
    """NVML's CUDA driver version against the torch wheel's CUDA runtime.

    Lower major: the wheel cannot run → fail. Same major, lower minor: it runs under CUDA
    minor-version compatibility (driver >= the plan's min_driver) without PTX JIT → warn.
    """
    have = cuda_int_to_str(reading.cuda_driver_version)
    if have is None:
        return _rec(CUDA_DRIVER_VERSION, "skip", "NVML reports no CUDA driver version")
    if not wheel_cuda:
        return _rec(
            CUDA_DRIVER_VERSION, "skip",
            f"the torch wheel has no CUDA (CPU build or torch missing); driver has CUDA {have}",
            value=have,
        )  # fmt: skip
    have_t, want_t = version_tuple(have), version_tuple(wheel_cuda)
    threshold = f">= {wheel_cuda}"
    remedy = (
        f"upgrade the driver to a branch supporting CUDA {wheel_cuda} (role nvidia_driver), "
        "or plan a wheel variant for this driver (gpufleet plan --driver ...)"
    )
    if have_t >= want_t:
        return _rec(
            CUDA_DRIVER_VERSION, "pass", f"driver supports CUDA {have} >= wheel CUDA {wheel_cuda}",
            value=have, threshold=threshold,
        )  # fmt: skip
    if have_t[:1] == want_t[:1]:
        return _rec(
            CUDA_DRIVER_VERSION,
            "warn",
            f"driver supports CUDA {have}, older than the wheel's CUDA {wheel_cuda}: it runs "
            "under CUDA minor-version compatibility only (no PTX JIT, some APIs missing).",
            value=have, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    return _rec(
        CUDA_DRIVER_VERSION,
        "fail",
        f"driver supports CUDA {have}, the torch wheel needs CUDA {wheel_cuda} "
        "(\"driver too old\").",
        value=have, threshold=threshold, remedy=remedy,
    )  # fmt: skip


def nouveau(modules: Iterable[str]) -> Record:
    loaded = "nouveau" in set(modules)
    return _rec(
        NOUVEAU,
        "fail" if loaded else "pass",
        "kernel module nouveau is loaded; the NVIDIA driver cannot bind the GPUs."
        if loaded
        else "nouveau not loaded",
        value="loaded" if loaded else "not loaded",
        threshold="not loaded",
        remedy="blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: blacklist nouveau, "
        "options nouveau modeset=0), `dracut -f`, reboot (role nvidia_driver does this)",
    )


def gpu_count(reading: NodeReading, expected: int | None, pci_gpus: int | None) -> Record:
    have = len(reading.gpus)
    if expected is not None:
        ok = have == expected
        return _rec(
            GPU_COUNT,
            "pass" if ok else "fail",
            f"NVML sees {have} GPU(s), expected {expected}."
            + ("" if ok or pci_gpus is None else f" The PCI bus shows {pci_gpus}."),
            value=have,
            threshold=f"== {expected}",
            remedy="check `lspci -d 10de:` and `journalctl -k | grep Xid` (Xid 79: GPU fell "
            "off the bus); reseat/RMA the missing GPU, or correct gpufleet_gpus_expected",
        )
    if have == 0:
        return _rec(
            GPU_COUNT, "fail", "NVML sees no GPU.", value=0, threshold="> 0",
            remedy="check `lspci -d 10de:` and the kernel log",
        )  # fmt: skip
    if pci_gpus is not None and pci_gpus > have:
        return _rec(
            GPU_COUNT,
            "warn",
            f"NVML sees {have} GPU(s) but the PCI bus shows {pci_gpus} NVIDIA GPUs (normal in "
            "a container given a subset of GPUs; on bare metal a GPU is missing).",
            value=have,
            threshold=f"== {pci_gpus} (PCI)",
            remedy="on bare metal: check Xid 79 in the kernel log and reseat/RMA; "
            "set gpus_expected to make this exact",
        )
    return _rec(GPU_COUNT, "pass", f"NVML sees {have} GPU(s)", value=have, threshold="> 0")


# ---------------------------------------------------------------- per-GPU state


def persistence_mode(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(PERSISTENCE, gpu)) is not None:
        return bad
    if gpu.persistence_mode is None:
        return _unsupported(PERSISTENCE, gpu, "persistence mode")
    on = gpu.persistence_mode
    return _rec(
        PERSISTENCE,
        "pass" if on else "fail",
        "persistence mode on" if on else "persistence mode is off (value 0, required 1).",
        gpu=gpu,
        value=int(on),
        threshold=1,
        remedy="systemctl enable --now nvidia-persistenced (or nvidia-smi -pm 1)",
    )


def ecc_mode(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(ECC_MODE, gpu)) is not None:
        return bad
    if gpu.ecc_enabled is None:
        return _unsupported(ECC_MODE, gpu, "ECC")
    if gpu.ecc_enabled:
        return _rec(ECC_MODE, "pass", "ECC enabled", gpu=gpu, value=1, threshold=1)
    pending = " (enabled at next reset)" if gpu.ecc_pending else ""
    return _rec(
        ECC_MODE,
        "warn",
        f"ECC is disabled{pending} (value 0, expected 1): memory errors go undetected.",
        gpu=gpu,
        value=0,
        threshold=1,
        remedy="nvidia-smi -i <gpu> -e 1, then reset the GPU or reboot",
    )


def ecc_uncorrectable(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(ECC_UNCORRECTABLE, gpu)) is not None:
        return bad
    v = gpu.ecc_volatile_uncorrected
    if v is None:
        return _unsupported(ECC_UNCORRECTABLE, gpu, "ECC error counters")
    ok = v <= VOLATILE_UNCORRECTABLE_LIMIT
    agg = gpu.ecc_aggregate_uncorrected
    return _rec(
        ECC_UNCORRECTABLE,
        "pass" if ok else "fail",
        f"{v} volatile uncorrectable ECC error(s) since the last driver load "
        f"(threshold {VOLATILE_UNCORRECTABLE_LIMIT}; aggregate {agg})."
        if not ok
        else "no volatile uncorrectable ECC errors",
        gpu=gpu,
        value=v,
        threshold=f"<= {VOLATILE_UNCORRECTABLE_LIMIT}",
        remedy="drain the node, reset the GPU (nvidia-smi -r) so the rows are remapped, "
        "re-run the checks; RMA if errors recur",
    )


def page_retirement(gpu: GpuReading) -> Record:
    """Dynamic page retirement (pre-Ampere; Ampere+ report NOT_SUPPORTED and use row remap)."""
    if (bad := gpu_unreadable(PAGE_RETIREMENT, gpu)) is not None:
        return bad
    sbe, dbe, pending = gpu.retired_pages_sbe, gpu.retired_pages_dbe, gpu.retired_pages_pending
    if sbe is None and dbe is None and pending is None:
        return _unsupported(
            PAGE_RETIREMENT, gpu, "page retirement (Ampere and newer use row remapping)"
        )
    total = (sbe or 0) + (dbe or 0)
    value = {"single_bit": sbe, "double_bit": dbe, "pending": pending, "total": total}
    threshold = f"pending == False, total < {DCGM_RETIRED_PAGES_LIMIT}"
    problems: list[str] = []
    remedies: list[str] = []
    if pending:
        problems.append("a page retirement is pending")
        remedies.append("reset the GPU (nvidia-smi -r) or reboot to retire the page")
    if total >= DCGM_RETIRED_PAGES_LIMIT:
        problems.append(f"{total} retired pages (DCGM limit {DCGM_RETIRED_PAGES_LIMIT})")
        remedies.append("the GPU has used its retirement budget: RMA")
    if problems:
        return _rec(
            PAGE_RETIREMENT, "fail", "; ".join(problems) + f" [value {value}].", gpu=gpu,
            value=value, threshold=threshold, remedy="; ".join(remedies),
        )  # fmt: skip
    return _rec(
        PAGE_RETIREMENT, "pass", f"{total} retired pages, none pending", gpu=gpu,
        value=value, threshold=threshold,
    )  # fmt: skip


def row_remap(gpu: GpuReading) -> Record:
    """Row remapping (Ampere and newer data-centre GPUs)."""
    if (bad := gpu_unreadable(ROW_REMAP, gpu)) is not None:
        return bad
    unc, pending, failure = (
        gpu.remapped_rows_uncorrectable,
        gpu.remapped_rows_pending,
        gpu.remapped_rows_failure,
    )
    if unc is None and pending is None and failure is None:
        return _unsupported(ROW_REMAP, gpu, "row remapping")
    value = {
        "correctable": gpu.remapped_rows_correctable,
        "uncorrectable": unc,
        "pending": pending,
        "failure": failure,
    }
    threshold = (
        f"pending == False, failure == False, uncorrectable < {DCGM_UNCORRECTABLE_REMAPS_LIMIT}"
    )
    problems: list[str] = []
    remedies: list[str] = []
    if pending:
        problems.append("a row remap is pending")
        remedies.append("reset the GPU (nvidia-smi -r) or reboot to apply the remap")
    if failure:
        problems.append("a row remap failed")
        remedies.append("remapping failed: RMA the GPU")
    if unc is not None and unc >= DCGM_UNCORRECTABLE_REMAPS_LIMIT:
        problems.append(
            f"{unc} rows remapped for uncorrectable errors "
            f"(DCGM limit {DCGM_UNCORRECTABLE_REMAPS_LIMIT})"
        )
        remedies.append("the GPU has exhausted its spare rows: RMA")
    if problems:
        return _rec(
            ROW_REMAP, "fail", "; ".join(problems) + f" [value {value}].", gpu=gpu,
            value=value, threshold=threshold, remedy="; ".join(dict.fromkeys(remedies)),
        )  # fmt: skip
    return _rec(
        ROW_REMAP, "pass", f"no pending or failed remaps, {unc} uncorrectable", gpu=gpu,
        value=value, threshold=threshold,
    )  # fmt: skip


def _is_idle(gpu: GpuReading) -> bool:
    reasons = gpu.clock_event_reasons or 0
    return bool(reasons & CLOCK_GPU_IDLE) or (
        gpu.utilization_gpu is not None and gpu.utilization_gpu <= PCIE_IDLE_UTILIZATION
    )


def pcie_link(gpu: GpuReading, under_load: GpuReading | None = None) -> Record:
    """Current PCIe generation and width against the maximum.

    Idle GPUs lower the link generation to save power. When the generation is low on an
    idle GPU, the caller may pass ``under_load`` (the GPU re-read while busy); without it
    the verdict is warn ("idle downshift, re-check under load"). Width is not downshifted
    at idle: narrower than max fails.
    """
    if (bad := gpu_unreadable(PCIE_LINK, gpu)) is not None:
        return bad
    if under_load is not None and under_load.error is not None:
        under_load = None  # the re-read failed: judge the idle reading
    g = under_load if under_load is not None else gpu
    cur_gen, max_gen = g.pcie_gen_current, g.pcie_gen_max
    cur_w, max_w = g.pcie_width_current, g.pcie_width_max
    if cur_gen is None or max_gen is None or cur_w is None or max_w is None:
        return _unsupported(PCIE_LINK, gpu, "PCIe link information")
    value = {"gen": cur_gen, "width": cur_w}
    threshold = {"gen": max_gen, "width": max_w}
    seen = f"Gen{cur_gen} x{cur_w}, max Gen{max_gen} x{max_w}"
    loaded = " under load" if g is under_load else ""
    remedy = (
        "reseat the GPU / riser, check the slot's BIOS link speed setting and "
        "`lspci -vv` LnkSta, look for PCIe AER errors in the kernel log"
    )
    if cur_w < max_w:
        return _rec(
            PCIE_LINK, "fail", f"PCIe link width below maximum: {seen}{loaded}.", gpu=gpu,
            value=value, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    if cur_gen < max_gen:
        if under_load is None and _is_idle(gpu):
            return _rec(
                PCIE_LINK, "warn",
                f"PCIe Gen{cur_gen} < Gen{max_gen} while the GPU is idle: idle downshift, "
                f"re-check under load ({seen}).",
                gpu=gpu, value=value, threshold=threshold,
                remedy="re-run the checks while the GPU is busy (or with torch able to load "
                "it); if it stays low, " + remedy,
            )  # fmt: skip
        return _rec(
            PCIE_LINK, "fail",
            f"PCIe link generation below maximum{loaded or ' on a busy GPU'}: {seen}.",
            gpu=gpu, value=value, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    return _rec(
        PCIE_LINK, "pass", f"PCIe {seen}{loaded}", gpu=gpu, value=value, threshold=threshold
    )


def nvlink(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(NVLINK, gpu)) is not None:
        return bad
    if not gpu.nvlink:
        return _rec(NVLINK, "skip", "no NVLink on this GPU", gpu=gpu, value=0)
    down = [link for link, active in gpu.nvlink if not active]
    value = {"present": len(gpu.nvlink), "inactive": down}
    if len(down) == len(gpu.nvlink):
        return _rec(
            NVLINK, "warn",
            f"none of the {len(gpu.nvlink)} NVLink link(s) is active: a PCIe card without "
            "an NVLink bridge, or the NVLink fabric is down.",
            gpu=gpu, value=value, threshold="all present links active",
            remedy="on HGX/NVSwitch systems start nvidia-fabricmanager (same version as the "
            "driver) and check `nvidia-smi nvlink -s`; on PCIe cards fit the bridge or ignore",
        )  # fmt: skip
    if down:
        return _rec(
            NVLINK, "fail",
            f"{len(down)} of {len(gpu.nvlink)} NVLink link(s) inactive: {down}.",
            gpu=gpu, value=value, threshold="all present links active",
            remedy="check `nvidia-smi nvlink -s`, that nvidia-fabricmanager runs (NVSwitch "
            "systems), reset the GPU; RMA the board if a link stays down",
        )  # fmt: skip
    return _rec(
        NVLINK, "pass", f"{len(gpu.nvlink)} NVLink link(s) active", gpu=gpu, value=value,
        threshold="all present links active",
    )  # fmt: skip


def clock_reason_names(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_REASON_NAMES.items() if mask & bit]
    other = mask & ~sum(CLOCK_REASON_NAMES)
    if other:
        names.append(f"unknown 0x{other:x}")
    return names


def clock_event_reasons(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(CLOCK_EVENTS, gpu)) is not None:
        return bad
    mask = gpu.clock_event_reasons
    if mask is None:
        return _unsupported(CLOCK_EVENTS, gpu, "clock event reasons")
    value = f"0x{mask:x}"
    names = ", ".join(clock_reason_names(mask)) or "none"
    if mask & CLOCK_REASONS_FAIL:
        return _rec(
            CLOCK_EVENTS, "fail",
            f"clocks held down by hardware: {value} ({names}).",
            gpu=gpu, value=value, threshold=f"no bits of 0x{CLOCK_REASONS_FAIL:x}",
            remedy="HW slowdown/thermal: check cooling, fans, inlet temperature and "
            "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`; power brake: check the PSUs and "
            "the chassis power-brake signal",
        )  # fmt: skip
    if mask & CLOCK_REASONS_WARN:
        return _rec(
            CLOCK_EVENTS, "warn",
            f"clocks limited by software: {value} ({names}).",
            gpu=gpu, value=value, threshold=f"no bits of 0x{CLOCK_REASONS_WARN:x}",
            remedy="check the power limit (`nvidia-smi -q -d POWER`, nvidia-smi -pl) and "
            "cooling",
        )  # fmt: skip
    return _rec(
        CLOCK_EVENTS, "pass", f"clock event reasons {value} ({names})", gpu=gpu, value=value,
        threshold=f"no bits of 0x{CLOCK_REASONS_FAIL | CLOCK_REASONS_WARN:x}",
    )  # fmt: skip


# ---------------------------------------------------------------- kernel log


def xid_errors(
    events: Sequence[XidEvent],
    gpus: Sequence[GpuReading],
    window_hours: float,
    now: datetime,
    source: str = "",
) -> Record:
    """Critical Xids inside the window fail; other Xids are listed but pass."""
    by_pci = {pci_key(g.pci_bus_id): g for g in gpus if g.pci_bus_id}
    critical = [e for e in events if e.critical]
    threshold = f"no critical Xid in the last {window_hours:g} h"
    if not critical:
        others = sorted({e.xid for e in events})
        note = f" (non-critical Xids seen: {others})" if others else ""
        return _rec(
            XID, "pass", f"no critical Xid in the last {window_hours:g} h{note}",
            value=others, threshold=threshold,
        )  # fmt: skip
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for e in critical:
        gpu = by_pci.get(pci_key(e.pci))
        where = f"GPU {gpu.label}" if gpu is not None else f"PCI {e.pci} (not enumerated by NVML)"
        groups.setdefault((where, e.xid), []).append(e)
    parts = []
    for (where, xid), evs in sorted(groups.items()):
        stamps = [e.when for e in evs if e.when is not None]
        last = f", last {max(stamps).isoformat(timespec='seconds')}" if stamps else ""
        parts.append(f"{where}: Xid {xid} x{len(evs)} ({evs[0].meaning}){last}")
    remedies = list(dict.fromkeys(e.remedy for e in critical))
    value = sorted({e.xid for e in critical})
    src = f" [{source}]" if source else ""
    return _rec(
        XID, "fail", f"critical Xid(s) in the kernel log since {window_hours:g} h: "
        + "; ".join(parts) + f"{src}.",
        value=value, threshold=threshold, remedy=" | ".join(remedies),
        gpu=None,
    )  # fmt: skip


# ---------------------------------------------------------------- PyTorch


def torch_cuda_available(tf: TorchFacts, wheel_variant: str | None) -> Record:
    if wheel_variant == "cpu":
        return _rec(TORCH_CUDA, "skip", "the plan installed the CPU wheel (variant cpu)")
    if tf.cuda_available:
        return _rec(TORCH_CUDA, "pass", f"torch {tf.version} sees CUDA", value=True)
    why = tf.error or (
        "the wheel is a CPU build" if tf.cuda is None else "torch.cuda.is_available() is False"
    )
    remedy = (
        "install the planned CUDA wheel (role torch_env; plan index_url)"
        if tf.cuda is None
        else "check the driver supports the wheel's CUDA (cuda_driver_version), "
        "/dev/nvidia* permissions and CUDA_VISIBLE_DEVICES"
    )
    return _rec(
        TORCH_CUDA, "fail", f"torch {tf.version or '(missing)'} cannot use CUDA: {why}.",
        value=False, threshold=True, remedy=remedy,
    )  # fmt: skip


def torch_device_count(tf: TorchFacts, nvml_count: int, visible: list[str] | None) -> Record:
    if not tf.cuda_available:
        return _rec(TORCH_COUNT, "skip", "torch cannot use CUDA (see torch_cuda_available)")
    expected = nvml_count if visible is None else min(len(visible), nvml_count)
    what = "NVML's count" if visible is None else "the CUDA_VISIBLE_DEVICES count"
    ok = tf.device_count == expected
    return _rec(
        TORCH_COUNT,
        "pass" if ok else "fail",
        f"torch sees {tf.device_count} GPU(s), {what} is {expected}" + ("" if ok else "."),
        value=tf.device_count,
        threshold=f"== {expected}",
        remedy="check CUDA_VISIBLE_DEVICES, cgroup device access (/dev/nvidia*) and "
        "`nvidia-smi`; a GPU NVML sees but CUDA cannot open is often faulty",
    )


def arch_match(cc: tuple[int, int], arch_list: Iterable[str]) -> str | None:
    """How a wheel's arch list covers compute capability ``cc``, or None.

    SASS ``sm_XY`` runs on the same major with minor <= the device's; ``sm_XYa`` only on
    exactly X.Y; PTX ``compute_XY`` is JIT-compiled on any cc >= X.Y.
    """
    major, minor = cc
    sass: list[tuple[int, str]] = []
    ptx: list[tuple[tuple[int, int], str]] = []
    for arch in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", arch.strip())
        if not m:
            continue
        kind, amaj, amin, suffix = m[1], int(m[2]), int(m[3]), m[4]
        if kind == "sm":
            if suffix == "a" and (amaj, amin) != cc:
                continue
            if amaj == major and amin <= minor:
                sass.append((amin, arch))
        elif (amaj, amin) <= (major, minor):
            ptx.append(((amaj, amin), arch))
    if sass:
        return f"SASS {max(sass)[1]}"
    if ptx:
        return f"PTX {max(ptx)[1]} (JIT-compiled at first use)"
    return None


def torch_arch(gpu: GpuReading, tf: TorchFacts) -> Record:
    if (bad := gpu_unreadable(TORCH_ARCH, gpu)) is not None:
        return bad
    if tf.cuda is None:
        return _rec(TORCH_ARCH, "skip", "the torch wheel is a CPU build", gpu=gpu)
    if gpu.compute_capability is None:
        return _rec(TORCH_ARCH, "skip", "compute capability unknown", gpu=gpu)
    cc = gpu.compute_capability
    sm = f"sm_{cc[0]}{cc[1]}"
    how = arch_match(cc, tf.arch_list)
    value = f"{cc[0]}.{cc[1]}"
    threshold = list(tf.arch_list)
    if how is None:
        return _rec(
            TORCH_ARCH, "fail",
            f"compute capability {value} ({sm}) is not in the wheel's arch list "
            f"{list(tf.arch_list)} (torch {tf.version}).",
            gpu=gpu, value=value, threshold=threshold,
            remedy=f"plan a torch release / variant that builds {sm} "
            f"(gpufleet plan --gpu-arch {sm}); old GPUs need older wheels",
        )  # fmt: skip
    return _rec(
        TORCH_ARCH, "pass", f"{sm} covered by {how}", gpu=gpu, value=value, threshold=threshold
    )


def torch_cuda_version(tf: TorchFacts, plan_cuda: str | None, wheel_variant: str | None) -> Record:
    if tf.error and tf.error.startswith("import torch failed"):
        return _rec(
            TORCH_CUDA_VERSION, "fail", f"{tf.error}.", value=None, threshold=plan_cuda,
            remedy="install the planned torch into the env (role torch_env)",
        )  # fmt: skip
    if wheel_variant == "cpu":
        expected: str | None = None
    elif plan_cuda:
        expected = plan_cuda
    else:
        return _rec(
            TORCH_CUDA_VERSION, "skip",
            f"no plan CUDA to compare with (torch.version.cuda = {tf.cuda}); "
            "pass --expect-cuda or provision with a manifest",
            value=tf.cuda,
        )  # fmt: skip
    ok = (tf.cuda or None) == expected or (
        tf.cuda is not None
        and expected is not None
        and version_tuple(tf.cuda)[:2] == version_tuple(expected)[:2]
    )
    return _rec(
        TORCH_CUDA_VERSION,
        "pass" if ok else "fail",
        f"torch {tf.version}: torch.version.cuda = {tf.cuda}, plan expects {expected}"
        + ("" if ok else "."),
        value=tf.cuda,
        threshold=expected,
        remedy="reinstall torch from the plan's index URL (role torch_env); a pip cache or "
        "mirror may have served another variant",
    )


def nccl_version(tf: TorchFacts, plan_nccl: str | None) -> Record:
    """Warn only: equality of the runtime NCCL with the plan is UNCONFIRMED (reference)."""
    if tf.cuda is None:
        return _rec(NCCL_VERSION, "skip", "the torch wheel is a CPU build (no NCCL)")
    if tf.nccl is None:
        return _rec(
            NCCL_VERSION, "warn", "torch reports no NCCL version.", value=None,
            threshold=plan_nccl, remedy="install a torch CUDA wheel built with NCCL",
        )  # fmt: skip
    if not plan_nccl:
        return _rec(
            NCCL_VERSION, "skip",
            f"no plan NCCL to compare with (torch NCCL {tf.nccl}); pass --expect-nccl",
            value=tf.nccl,
        )  # fmt: skip
    ok = version_tuple(tf.nccl) == version_tuple(plan_nccl)
    return _rec(
        NCCL_VERSION,
        "pass" if ok else "warn",
        f"torch NCCL {tf.nccl}, plan {plan_nccl}" + ("" if ok else "."),
        value=tf.nccl,
        threshold=plan_nccl,
        remedy="check which nvidia-nccl-cu* wheel pip resolved (pip show nvidia-nccl-cu12) "
        "and whether LD_LIBRARY_PATH / LD_PRELOAD injects another libnccl",
    )


def cuda_visible_devices(tf: TorchFacts, visible: list[str] | None, nvml_count: int) -> Record:
    if visible is None:
        return _rec(VISIBLE_DEVICES, "skip", "CUDA_VISIBLE_DEVICES is not set")
    if not tf.cuda_available and visible:
        return _rec(VISIBLE_DEVICES, "skip", "torch cannot use CUDA (see torch_cuda_available)")
    expected = min(len(visible), nvml_count)
    ok = tf.device_count == expected
    return _rec(
        VISIBLE_DEVICES,
        "pass" if ok else "fail",
        f"CUDA_VISIBLE_DEVICES={','.join(visible)} lists {len(visible)} device(s); torch "
        f"sees {tf.device_count}" + ("" if ok else "."),
        value=tf.device_count,
        threshold=f"== {expected}",
        remedy="check the entries (indices or GPU-UUIDs from `nvidia-smi -L`); CUDA stops at "
        "the first invalid one",
    )


def toolkit(nvcc: str | None, release: str | None, plan_toolkit: str | None) -> Record:
    if nvcc is None:
        return _rec(TOOLKIT, "skip", "CUDA toolkit not installed (no nvcc)")
    if release is None:
        return _rec(
            TOOLKIT, "fail", f"`{nvcc} --version` printed no release.", value=None,
            threshold=plan_toolkit, remedy="reinstall the toolkit (role cuda_toolkit)",
        )  # fmt: skip
    if not plan_toolkit:
        return _rec(
            TOOLKIT, "skip", f"no plan toolkit to compare with ({nvcc}: release {release})",
            value=release,
        )  # fmt: skip
    ok = version_tuple(release)[:2] == version_tuple(plan_toolkit)[:2]
    return _rec(
        TOOLKIT,
        "pass" if ok else "fail",
        f"{nvcc}: release {release}, plan {plan_toolkit}" + ("" if ok else "."),
        value=release,
        threshold=plan_toolkit,
        remedy="install the plan's toolkit_package (role cuda_toolkit) and point "
        "/usr/local/cuda at it (alternatives --config cuda)",
    )


def toolkit_from_plan(plan: Mapping[str, object]) -> str | None:
    """ "12.8" from the plan's toolkit_prefix (/usr/local/cuda-12.8) or toolkit_package."""
    for key in ("toolkit_prefix", "toolkit_package"):
        raw = plan.get(key)
        if isinstance(raw, str):
            m = re.search(r"cuda-(?:toolkit-)?(\d+)[.-](\d+)$", raw.rstrip("/"))
            if m:
                return f"{m[1]}.{m[2]}"
    return None
