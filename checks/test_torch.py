"""The env's PyTorch against the GPUs and the plan; the CUDA toolkit against the plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.node import health
from gpufleet.node.facts import TorchFacts
from gpufleet.node.nvml import GpuReading, NodeReading

if TYPE_CHECKING:
    from conftest import Ctx, Emitter


def test_torch_cuda_available(
    node_reading: NodeReading, torch_facts: TorchFacts, ctx: Ctx, emit: Emitter
) -> None:
    if not node_reading.gpus:
        emit.no_driver_or_no_gpu()
    emit(health.torch_cuda_available(torch_facts, ctx.wheel_variant))


def test_torch_device_count(
    node_reading: NodeReading, torch_facts: TorchFacts, ctx: Ctx, emit: Emitter
) -> None:
    if not node_reading.gpus:
        emit.no_driver_or_no_gpu()
    emit(health.torch_device_count(torch_facts, len(node_reading.gpus), ctx.visible()))


def test_torch_arch_list(gpu: GpuReading, torch_facts: TorchFacts, emit: Emitter) -> None:
    emit(health.torch_arch(gpu, torch_facts))


def test_torch_cuda_version(torch_facts: TorchFacts, ctx: Ctx, emit: Emitter) -> None:
    emit(health.torch_cuda_version(torch_facts, ctx.plan_cuda, ctx.wheel_variant))


def test_nccl_version(torch_facts: TorchFacts, ctx: Ctx, emit: Emitter) -> None:
    emit(health.nccl_version(torch_facts, ctx.plan_nccl))


def test_cuda_visible_devices(
    node_reading: NodeReading, torch_facts: TorchFacts, ctx: Ctx, emit: Emitter
) -> None:
    emit(health.cuda_visible_devices(torch_facts, ctx.visible(), len(node_reading.gpus)))


def test_cuda_toolkit(ctx: Ctx, emit: Emitter) -> None:
    nvcc, release = ctx.nvcc()
    emit(health.toolkit(nvcc, release, ctx.plan_toolkit))
