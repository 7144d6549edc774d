"""GPU memory health: ECC mode, uncorrectable errors, page retirement, row remapping."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.node import health
from gpufleet.node.nvml import GpuReading

if TYPE_CHECKING:
    from conftest import Emitter


def test_ecc_mode(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.ecc_mode(gpu))


def test_ecc_uncorrectable_volatile(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.ecc_uncorrectable(gpu))


def test_page_retirement(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.page_retirement(gpu))


def test_row_remap(gpu: GpuReading, emit: Emitter) -> None:
    emit(health.row_remap(gpu))
