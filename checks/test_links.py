"""Interconnect and clocks: PCIe link, NVLink, clock event reasons, Xid errors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.node import health, xid
from gpufleet.node.nvml import GpuReading

if TYPE_CHECKING:
    from conftest import Ctx, Emitter


def test_pcie_link(gpu: GpuReading, ctx: Ctx, emit: Emitter) -> None:
    first = health.pcie_link(gpu)
    if first.status == "warn" and "idle downshift" in first.message:
        loaded = ctx.under_load(gpu)
        if loaded is not None:
            first = health.pcie_link(gpu, under_load=loaded)
    emit(first)


def test_nvlink(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.nvlink(gpu))


def test_clock_event_reasons(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.clock_event_reasons(gpu))


def test_xid_errors(ctx: Ctx, emit: Emitter) -> None:
    window = float(ctx.opt("xid_window_hours"))
    try:
        lines, source, now = ctx.kernel_log()
    except (xid.KernelLogUnavailable, OSError) as exc:
        emit(health.kernel_log_unreadable(exc))
        return
    ctx.meta["kernel_log"] = source
    events = xid.recent(xid.parse(lines), now, window)
    gpus = () if ctx.reading is None else ctx.reading.gpus
    emit(health.xid_errors(events, gpus, window, now, source))
