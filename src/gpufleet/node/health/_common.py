"""Helpers shared by the check families: one record builder, the no-driver/no-GPU verdicts."""

from __future__ import annotations

import re

from gpufleet.node.nvml import NVML_ERROR_REMEDY, GpuReading, NvmlUnavailable
from gpufleet.results import NEEDS_REMEDY, Record, Status

NO_DRIVER_REASON = "no NVIDIA driver"
#: NVML errors that say "not now" rather than "broken" (nvml.h): NVML_ERROR_TIMEOUT (10),
#: NVML_ERROR_NOT_READY (27). A GPU read failing with one of them is incomplete, not failed.
NVML_TRANSIENT_ERRORS: frozenset[int] = frozenset({10, 27})
TRANSIENT_REMEDY = (
    "rerun the check; if NVML keeps timing out on this GPU, read `nvidia-smi -q -i <gpu>` "
    "and `journalctl -k` for Xid 79/119 (a GPU about to fall off the bus)"
)


def version_tuple(text: str) -> tuple[int, ...]:
    """ "535.104.05" → (535, 104, 5); "12.8" → (12, 8). Non-numeric tails are ignored."""
    parts: list[int] = []
    for piece in text.strip().split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m[0]))
    return tuple(parts)


def rec(
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
    if remedy and status in NEEDS_REMEDY:
        text = f"{text} Fix: {remedy}"
    return Record(
        name=name,
        status=status,
        value=value,
        threshold=threshold,
        remedy=remedy if status in NEEDS_REMEDY else "",
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
    """Fail when NVML could not read this GPU (e.g. GPU lost); None when it could.
    A transient NVML error (timeout, not ready) is incomplete: the GPU may be fine."""
    if gpu.error is None:
        return None
    if gpu.error_code in NVML_TRANSIENT_ERRORS:
        return rec(
            name, "incomplete", f"NVML could not read this GPU in time: {gpu.error}.", gpu=gpu,
            value=gpu.error_code, threshold="readable", remedy=TRANSIENT_REMEDY,
        )  # fmt: skip
    remedy = NVML_ERROR_REMEDY.get(
        gpu.error_code or -1, "inspect `nvidia-smi -q -i <gpu>` and the kernel log"
    )
    return rec(
        name, "fail", f"NVML cannot read this GPU: {gpu.error}.", gpu=gpu,
        value=gpu.error_code, threshold="readable", remedy=remedy,
    )  # fmt: skip


def unsupported(name: str, gpu: GpuReading, what: str) -> Record:
    return rec(
        name,
        "skip",
        f"{what} not supported on this GPU ({gpu.name or 'unknown model'})",
        gpu=gpu,
    )
