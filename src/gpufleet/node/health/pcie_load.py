"""The PCIe re-check under load: an idle GPU lowers its link generation, so a GPU whose link is
below max while idle is loaded with torch and its link read again while the queues are busy
(docs/checks.md, "PCIe idle downshift")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gpufleet.node import facts as nodefacts
from gpufleet.node.health.links import pcie_link
from gpufleet.node.nvml import GpuReading, NvmlReader

#: Seconds of matmul + host-to-device copies used to wake an idle PCIe link before
#: re-reading it (a second, longer try when the first leaves the link low).
PCIE_LOAD_SECONDS = (0.2, 1.0)


def idle_downshifted(gpu: GpuReading) -> bool:
    first = pcie_link(gpu)
    return first.status == "warn" and "idle downshift" in first.message


def reread_under_load(
    reader: NvmlReader,
    tf: nodefacts.TorchFacts,
    gpus: Sequence[GpuReading],
    meta: dict[str, Any],
) -> dict[int, GpuReading]:
    """Load these GPUs together with torch and re-read NVML while their queues are busy.

    All GPUs are loaded at once (one short load per node, not per GPU). GPUs still below
    max after the first load get a second, longer one, so a slow upshift is not a fault.
    Returns the re-reads by NVML index; GPUs torch cannot reach are left out. What was
    re-checked (``pcie_load_rechecks``) or went wrong (``pcie_load_errors``) goes into meta.
    """
    targets = {
        g.index: i for g in gpus if (i := nodefacts.torch_index_for(g.pci_bus_id, tf)) is not None
    }
    readings: dict[int, GpuReading] = {}
    if not targets:
        return readings
    try:
        import torch  # noqa: PLC0415

        work = {}
        for index, tidx in targets.items():
            dev = torch.device("cuda", tidx)
            work[index] = (
                dev,
                torch.randn(2048, 2048, device=dev),
                torch.empty(16 << 20, dtype=torch.uint8).pin_memory(),
            )
        pending = set(targets)
        for seconds in PCIE_LOAD_SECONDS:
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                for index in pending:
                    dev, a, host = work[index]
                    _ = a @ a
                    _ = host.to(dev, non_blocking=True)
            for index in pending:  # read while the queues are still busy
                readings[index] = reader.reread_gpu(index)
            for index in pending:
                torch.cuda.synchronize(work[index][0])
            pending = {
                i for i in pending
                if readings[i].error is None
                and readings[i].pcie_gen_current != readings[i].pcie_gen_max
            }  # fmt: skip
            if not pending:
                break
        meta["pcie_load_rechecks"] = [g.label for g in gpus if g.index in readings]
    except Exception as exc:  # a failing load must not crash the PCIe check
        meta.setdefault("pcie_load_errors", []).append(str(exc))
    return readings
