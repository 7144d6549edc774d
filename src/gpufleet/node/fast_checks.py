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

``run_pass`` returns the records with what the pass read beside them (:class:`PassFacts`:
versions, the system profile, GPUs seen and expected, Xid events, per-GPU counts), which
gpufleet.node.textfile exports to Prometheus.

Nothing here imports torch or loads a GPU: the slow checks (torch arch, PCIe under load,
the smoke tests) stay in ``make verify``. A node without a driver skips the GPU checks
unless ``require_gpu`` (manifest or option) says it must have one, as in checks/.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import __version__
from gpufleet.errors import GpufleetError
from gpufleet.node import xid
from gpufleet.node.health.check_registry import health_records, profile_snapshot
from gpufleet.node.health.context import DEFAULT_MANIFEST, NodeContext
from gpufleet.node.nvml import GpuReading, NvmlReader, RecordedReader
from gpufleet.results import Record

__all__ = [
    "DEFAULT_MANIFEST",
    "GpuFigures",
    "HealthPass",
    "PassFacts",
    "pass_facts",
    "run_checks",
    "run_pass",
]


@dataclass(frozen=True)
class GpuFigures:
    """The counts a health pass judges one GPU on, as NVML reported them (None: not
    reported by this GPU)."""

    ecc_volatile_uncorrected: int | None = None  # errors since the driver loaded
    remapped_rows_uncorrectable: int | None = None  # rows
    retired_pages: int | None = None  # pages retired for single- and double-bit errors
    nvlink_inactive: int | None = None  # present links that are not active

    @classmethod
    def of(cls, gpu: GpuReading) -> GpuFigures:
        sbe, dbe = gpu.retired_pages_sbe, gpu.retired_pages_dbe
        return cls(
            ecc_volatile_uncorrected=gpu.ecc_volatile_uncorrected,
            remapped_rows_uncorrectable=gpu.remapped_rows_uncorrectable,
            retired_pages=None if sbe is None and dbe is None else (sbe or 0) + (dbe or 0),
            nvlink_inactive=sum(not up for _, up in gpu.nvlink) if gpu.nvlink else None,
        )


@dataclass(frozen=True)
class PassFacts:
    """What a health pass read besides its verdicts, for the Prometheus metrics
    (gpufleet.node.textfile): the versions of the ``_info`` metric and the figures. "" or
    None: not known on this node (no driver, no manifest, no profile fits)."""

    driver: str = ""  # NVML's driver version
    cuda: str = ""  # the CUDA version the driver supports (NVML)
    torch: str = ""  # the env's torch (manifest env_torch)
    torch_cuda: str = ""  # the CUDA of the env's torch build (the plan's; "" for a CPU build)
    profile: str = ""  # the system profile the node is judged against (docs/profiles.md)
    gpufleet: str = __version__
    gpus: int | None = None  # GPUs NVML enumerates
    gpus_expected: int | None = None  # the pinned count (gpus_expected), else the profile's
    xid_window_s: float = xid.DEFAULT_WINDOW_HOURS * 3600
    xid_events: dict[int, int] = field(default_factory=dict)  # Xid -> events in the window
    gpu_figures: dict[str, GpuFigures] = field(default_factory=dict)  # GPU index -> figures

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["xid_events"] = {str(k): v for k, v in self.xid_events.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PassFacts:
        """The inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["xid_events"] = {int(k): int(v) for k, v in (data.get("xid_events") or {}).items()}
        known["gpu_figures"] = {
            str(k): GpuFigures(**v) for k, v in (data.get("gpu_figures") or {}).items()
        }
        return cls(**known)


@dataclass(frozen=True)
class HealthPass:
    """One health pass: the records, in check order, and the facts beside them (None: the
    pass did not finish, nothing was read)."""

    records: list[Record]
    facts: PassFacts | None


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
    return run_pass(
        manifest_path=manifest_path,
        recording=recording,
        require_gpu=require_gpu,
        expected_gpus=expected_gpus,
        xid_window_h=xid_window_h,
        reader=reader,
    ).records


def run_pass(
    *,
    manifest_path: Path = DEFAULT_MANIFEST,
    recording: dict[str, Any] | None = None,
    require_gpu: bool | None = None,
    expected_gpus: int | None = None,
    xid_window_h: float = xid.DEFAULT_WINDOW_HOURS,
    reader: NvmlReader | None = None,
) -> HealthPass:
    """:func:`run_checks`' records with the facts the pass read (:class:`PassFacts`)."""
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
        records = health_records(ctx)
        return HealthPass(records, pass_facts(ctx))
    finally:
        ctx.close()


def pass_facts(ctx: NodeContext) -> PassFacts:
    """The facts of :class:`PassFacts` from a context the health checks have run on."""
    reading = ctx.reading
    snapshot = profile_snapshot(ctx)
    chosen = None if snapshot is None else ctx.profile_choice(snapshot)
    profile = None if chosen is None or isinstance(chosen, GpufleetError) else chosen
    expected = ctx.expected_gpus
    if expected is None and profile is not None:
        expected = profile.gpu_count
    cuda = ctx.plan_cuda if ctx.wheel_variant != "cpu" else None
    return PassFacts(
        driver=reading.driver_version if reading is not None else "",
        cuda=(reading.cuda_driver_version_str or "") if reading is not None else "",
        torch=str(ctx.manifest.get("env_torch") or ""),
        torch_cuda=cuda or "",
        profile=profile.name if profile is not None else "",
        gpus=len(reading.gpus) if reading is not None else None,
        gpus_expected=expected,
        xid_window_s=ctx.xid_window_hours * 3600,
        xid_events=dict(ctx.meta.get("xid_events") or {}),
        gpu_figures={}
        if reading is None
        else {str(g.index): GpuFigures.of(g) for g in reading.gpus if g.error is None},
    )
