"""NVSwitch fabric and cluster network: Fabric Manager, GPU fabric state, InfiniBand/RoCE
ports, GPUDirect RDMA (gpufleet.node.nvswitch, gpufleet.node.ib_ports; docs/hgx.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.node import ib_ports as ibports
from gpufleet.node import nvswitch as fabric

if TYPE_CHECKING:
    from conftest import Ctx, Emitter


def test_fabric_manager(ctx: Ctx, emit: Emitter) -> None:
    emit(fabric.fabric_manager(ctx.platform(), ctx.reading, ctx.nvml_error))


def test_gpu_fabric_state(ctx: Ctx, emit: Emitter) -> None:
    platform = ctx.platform()
    if ctx.reading is None:
        skip = fabric.not_nvswitch(fabric.GPU_FABRIC_STATE, platform)
        if skip is not None:  # nothing to check, driver or not
            emit(skip)
        emit.no_driver_or_no_gpu()
        return
    emit(fabric.gpu_fabric_state(platform, ctx.reading))


def _expected_ports(ctx: Ctx) -> list[str] | None:
    raw = ctx.opt("ib_ports") or ctx.manifest.get("ib_ports")
    if isinstance(raw, str):
        raw = raw.split(",")
    return [str(p).strip() for p in raw if str(p).strip()] if raw else None


def test_ib_ports(ctx: Ctx, emit: Emitter) -> None:
    ports = ibports.ports_from_raw(ctx.platform().infiniband)
    rate = ctx.opt("ib_min_rate") or ctx.manifest.get("ib_min_rate_gbps")
    layer = ctx.opt("ib_link_layer") or ctx.manifest.get("ib_link_layer")
    emit(ibports.ib_ports(ports, _expected_ports(ctx), rate and float(rate), layer or None))


def test_gpudirect_rdma(ctx: Ctx, emit: Emitter) -> None:
    ports = ibports.ports_from_raw(ctx.platform().infiniband)
    gpus = len(ctx.reading.gpus) if ctx.reading is not None else ctx.pci_gpus()
    emit(ibports.gpudirect_rdma(ports, gpus, ctx.modules()))
