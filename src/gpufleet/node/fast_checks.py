"""The fast node health run (``gpufleet health``): the checks a scheduler's health-check
program can afford every few minutes, in one process, without torch.

The checks are the ``health`` tier of gpufleet.node.health.check_registry, with the same record
names as the checks suite (checks/) where the check is the same:

* node: the gpufleet manifest is readable (``manifest``), the env python it names exists
  (``env_python``), the interfaces named in nccl.env exist (``nccl_env_interfaces``);
* NVML: driver loaded and at least the plan's floor, GPU count against the manifest and
  the PCI bus, and per GPU: readable, persistence mode, volatile uncorrectable ECC,
  page retirement, row remapping, NVLink; the NVSwitch fabric state; Xid errors in the
  kernel log window.

Nothing here imports torch or loads a GPU: the slow checks (torch arch, PCIe under load,
the smoke tests) stay in ``make verify``. A node without a driver skips the GPU checks
unless ``require_gpu`` (manifest or option) says it must have one, as in checks/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.node import xid
from gpufleet.node.health.check_registry import health_records
from gpufleet.node.health.context import DEFAULT_MANIFEST, NodeContext
from gpufleet.node.nvml import NvmlReader, RecordedReader
from gpufleet.results import Record

__all__ = ["DEFAULT_MANIFEST", "run_checks"]


def run_checks(
    *,
    manifest_path: Path = DEFAULT_MANIFEST,
    recording: dict[str, Any] | None = None,
    require_gpu: bool | None = None,
    expected_gpus: int | None = None,
    xid_window_h: float = xid.DEFAULT_WINDOW_HOURS,
    reader: NvmlReader | None = None,
) -> list[Record]:
    """Every fast check on this node (real NVML, or a recording), in check order."""
    if reader is None:
        from gpufleet.node.nvml import PynvmlReader  # noqa: PLC0415 - needs nvidia-ml-py

        reader = RecordedReader(recording) if recording is not None else PynvmlReader()
    options = {
        "require_gpu": require_gpu,
        "expected_gpus": expected_gpus,
        "xid_window_hours": xid_window_h,
    }
    ctx = NodeContext.open(options, manifest_path, reader, recording)
    try:
        return health_records(ctx)
    finally:
        ctx.close()
