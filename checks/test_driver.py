"""Driver, kernel modules and GPU inventory."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.node import health
from gpufleet.node.nvml import GpuReading, NodeReading

if TYPE_CHECKING:
    from conftest import Ctx, Emitter


def test_driver_loaded(node_reading: NodeReading, emit: Emitter) -> None:
    emit(health.driver_loaded(node_reading))


def test_driver_version(node_reading: NodeReading, ctx: Ctx, emit: Emitter) -> None:
    emit(health.driver_version(node_reading, ctx.min_driver))


def test_cuda_driver_version(node_reading: NodeReading, ctx: Ctx, emit: Emitter) -> None:
    wheel_cuda = ctx.plan_cuda if ctx.wheel_variant != "cpu" else None
    tf = ctx.torch()
    emit(health.cuda_driver_version(node_reading, tf.cuda or wheel_cuda))


def test_nouveau_not_loaded(ctx: Ctx, emit: Emitter) -> None:
    emit(health.nouveau(ctx.modules()))


def test_gpu_count(node_reading: NodeReading, ctx: Ctx, emit: Emitter) -> None:
    if not node_reading.gpus and not ctx.require_gpu and ctx.expected_gpus is None:
        emit(health.no_gpus("gpu_count", require_gpu=False))
    emit(health.gpu_count(node_reading, ctx.expected_gpus, ctx.pci_gpus()))


def test_persistence_mode(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.persistence_mode(gpu))
