"""Measure one GPU's host<->device copy bandwidth with torch (the figure the check
:mod:`gpufleet.node.health.host_copy` judges; GPU only, never in a recording).

A pinned host buffer and a device buffer of ``size_bytes``; after ``warmup`` copies each
way, ``repeats`` host-to-device copies then ``repeats`` device-to-host copies, each timed
with CUDA events on the device's stream; the figure per direction is the median. The calling
thread is pinned to the GPU's NUMA-local CPUs (sysfs ``local_cpulist``) while it allocates
and copies, so the pinned buffer lives on the GPU's NUMA node, as Azure's check_cuda_bw runs
under numactl (https://github.com/Azure/azurehpc-health-checks/blob/main/customTests/azure_cuda_bandwidth.nhc).
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from gpufleet.node.health.host_copy import COPY_BYTES, CopyFigure, gbs

REPEATS = 5
WARMUP = 2
PCI_SYSFS = Path("/sys/bus/pci/devices")


def sysfs_name(pci_bus_id: str) -> str | None:
    """NVML's ``00000000:3B:00.0`` as sysfs spells it, ``0000:3b:00.0``; None if unreadable."""
    m = re.fullmatch(
        r"\s*(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])\s*", pci_bus_id
    )
    if not m:
        return None
    return f"{int(m[1] or '0', 16):04x}:{m[2].lower()}:{m[3].lower()}.{m[4]}"


def parse_cpulist(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part.strip():
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def local_cpus(pci_bus_id: str, root: Path = PCI_SYSFS) -> set[int] | None:
    """The CPUs of the GPU's NUMA node (sysfs ``local_cpulist``); None when unknown."""
    name = sysfs_name(pci_bus_id)
    if name is None:
        return None
    try:
        cpus = parse_cpulist((root / name / "local_cpulist").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return cpus or None


@contextmanager
def pinned_to(cpus: set[int] | None) -> Iterator[bool | None]:
    """Run the block on ``cpus`` (restored after); yields True when pinned there, None when
    the CPUs are unknown or this process may not run on them."""
    allowed = os.sched_getaffinity(0)
    usable = (cpus or set()) & allowed
    if not usable:
        yield None
        return
    os.sched_setaffinity(0, usable)
    try:
        yield True
    finally:
        os.sched_setaffinity(0, allowed)


def figure_from_times(
    size_bytes: int, h2d_s: Sequence[float], d2h_s: Sequence[float], numa_local: bool | None
) -> CopyFigure:
    """The figure from the timed copies (seconds each): the median per direction."""
    if not h2d_s or not d2h_s:
        raise ValueError("no timed copy")
    return CopyFigure(
        h2d_gbs=gbs(size_bytes, statistics.median(h2d_s)),
        d2h_gbs=gbs(size_bytes, statistics.median(d2h_s)),
        size_bytes=size_bytes,
        repeats=min(len(h2d_s), len(d2h_s)),
        numa_local=numa_local,
    )


def measure(
    torch_index: int,
    pci_bus_id: str,
    size_bytes: int = COPY_BYTES,
    repeats: int = REPEATS,
    warmup: int = WARMUP,
) -> CopyFigure:
    """Copy ``size_bytes`` between pinned host memory and torch device ``torch_index`` (the
    GPU at ``pci_bus_id``). Raises whatever torch raises (no CUDA, out of memory)."""
    import torch  # noqa: PLC0415  (torch is optional: imported only to measure)

    device = torch.device("cuda", torch_index)
    with pinned_to(local_cpus(pci_bus_id)) as numa_local, torch.cuda.device(device):
        host = torch.empty(size_bytes, dtype=torch.uint8).pin_memory()
        dev = torch.empty(size_bytes, dtype=torch.uint8, device=device)
        stream = torch.cuda.current_stream(device)

        def timed(copy: Callable[[], object]) -> float:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record(stream)
            copy()
            end.record(stream)
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3  # ms -> s

        def h2d() -> object:
            return dev.copy_(host, non_blocking=True)

        def d2h() -> object:
            return host.copy_(dev, non_blocking=True)

        for _ in range(warmup):
            h2d()
            d2h()
        torch.cuda.synchronize(device)
        h2d_s = [timed(h2d) for _ in range(repeats)]
        d2h_s = [timed(d2h) for _ in range(repeats)]
    return figure_from_times(size_bytes, h2d_s, d2h_s, numa_local)
