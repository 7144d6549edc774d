"""Links and clocks: PCIe generation/width, NVLink state, clock event reasons."""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.node.health._common import gpu_unreadable, rec, unsupported
from gpufleet.node.health.names import CLOCK_EVENTS, NVLINK, PCIE_LINK
from gpufleet.node.nvml import GpuReading
from gpufleet.results import Record

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
        return unsupported(PCIE_LINK, gpu, "PCIe link information")
    value = {"gen": cur_gen, "width": cur_w}
    threshold = {"gen": max_gen, "width": max_w}
    seen = f"Gen{cur_gen} x{cur_w}, max Gen{max_gen} x{max_w}"
    loaded = " under load" if g is under_load else ""
    remedy = (
        "reseat the GPU / riser, check the slot's BIOS link speed setting and "
        "`lspci -vv` LnkSta, look for PCIe AER errors in the kernel log"
    )
    if cur_w < max_w:
        return rec(
            PCIE_LINK, "fail", f"PCIe link width below maximum: {seen}{loaded}.", gpu=gpu,
            value=value, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    if cur_gen < max_gen:
        if under_load is None and _is_idle(gpu):
            return rec(
                PCIE_LINK, "warn",
                f"PCIe Gen{cur_gen} < Gen{max_gen} while the GPU is idle: idle downshift, "
                f"re-check under load ({seen}).",
                gpu=gpu, value=value, threshold=threshold,
                remedy="re-run the checks while the GPU is busy (or with torch able to load "
                "it); if it stays low, " + remedy,
            )  # fmt: skip
        return rec(
            PCIE_LINK, "fail",
            f"PCIe link generation below maximum{loaded or ' on a busy GPU'}: {seen}.",
            gpu=gpu, value=value, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    return rec(PCIE_LINK, "pass", f"PCIe {seen}{loaded}", gpu=gpu, value=value, threshold=threshold)


def nvlink(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(NVLINK, gpu)) is not None:
        return bad
    if not gpu.nvlink:
        return rec(NVLINK, "skip", "no NVLink on this GPU", gpu=gpu, value=0)
    down = [link for link, active in gpu.nvlink if not active]
    value = {"present": len(gpu.nvlink), "inactive": down}
    if len(down) == len(gpu.nvlink):
        return rec(
            NVLINK, "warn",
            f"none of the {len(gpu.nvlink)} NVLink link(s) is active: a PCIe card without "
            "an NVLink bridge, or the NVLink fabric is down.",
            gpu=gpu, value=value, threshold="all present links active",
            remedy="on HGX/NVSwitch systems start nvidia-fabricmanager (same version as the "
            "driver) and check `nvidia-smi nvlink -s`; on PCIe cards fit the bridge or ignore",
        )  # fmt: skip
    if down:
        return rec(
            NVLINK, "fail",
            f"{len(down)} of {len(gpu.nvlink)} NVLink link(s) inactive: {down}.",
            gpu=gpu, value=value, threshold="all present links active",
            remedy="check `nvidia-smi nvlink -s`, that nvidia-fabricmanager runs (NVSwitch "
            "systems), reset the GPU; RMA the board if a link stays down",
        )  # fmt: skip
    return rec(
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
        return unsupported(CLOCK_EVENTS, gpu, "clock event reasons")
    value = f"0x{mask:x}"
    names = ", ".join(clock_reason_names(mask)) or "none"
    if mask & CLOCK_REASONS_FAIL:
        return rec(
            CLOCK_EVENTS, "fail",
            f"clocks held down by hardware: {value} ({names}).",
            gpu=gpu, value=value, threshold=f"no bits of 0x{CLOCK_REASONS_FAIL:x}",
            remedy="HW slowdown/thermal: check cooling, fans, inlet temperature and "
            "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE`; power brake: check the PSUs and "
            "the chassis power-brake signal",
        )  # fmt: skip
    if mask & CLOCK_REASONS_WARN:
        return rec(
            CLOCK_EVENTS, "warn",
            f"clocks limited by software: {value} ({names}).",
            gpu=gpu, value=value, threshold=f"no bits of 0x{CLOCK_REASONS_WARN:x}",
            remedy="check the power limit (`nvidia-smi -q -d POWER`, nvidia-smi -pl) and "
            "cooling",
        )  # fmt: skip
    return rec(
        CLOCK_EVENTS, "pass", f"clock event reasons {value} ({names})", gpu=gpu, value=value,
        threshold=f"no bits of 0x{CLOCK_REASONS_FAIL | CLOCK_REASONS_WARN:x}",
    )  # fmt: skip
