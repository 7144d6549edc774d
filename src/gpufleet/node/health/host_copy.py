"""The host<->device copy check: one GPU's copy bandwidth against its profile's floor.

The figure (measured by :mod:`gpufleet.node.health.host_copy_bench`, never here) is the lower
of host-to-device and device-to-host bandwidth of a pinned host buffer (128 MiB unless the
profile's floor states its size), in GB/s (10^9 bytes): what Azure's ``check_cuda_bw`` judges
per GPU (https://github.com/Azure/azurehpc-health-checks/blob/main/customTests/azure_cuda_bandwidth.nhc).
The floor is the profile's ``floors.host_device_copy_gbs`` (docs/profiles.md).

Verdicts (pure: numbers in, a Record out):

* no figure (no CUDA torch, torch cannot reach this GPU, an NVML recording): skip, with why;
* the figure at or above the floor: pass;
* a null floor, or no profile chosen: pass, the figure recorded, "no floor in profile X";
* below the floor, measured from the GPU's NUMA-local CPUs: fail;
* below the floor, where the measurement could not be pinned to them: warn (a remote NUMA
  node alone lowers the figure; rerun pinned).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.node.health._common import gpu_unreadable, rec
from gpufleet.node.health.names import HOST_DEVICE_COPY
from gpufleet.node.nvml import GpuReading
from gpufleet.results import Record

#: The profile floor this check judges (docs/profiles.md).
FLOOR = "host_device_copy_gbs"
#: The copy size when the profile's floor states none: 128 MiB, as Azure's check_cuda_bw.
COPY_BYTES = 128 << 20
REMEDY = (
    "reseat the GPU / riser and check its PCIe link width and generation (check pcie_link; "
    "`lspci -vv` LnkSta, `nvidia-smi -q -d PCIE`), PCIe AER errors in the kernel log, and NUMA "
    "pinning (`nvidia-smi topo -m` names the GPU's CPU affinity and NUMA node)"
)
REMEDY_UNPINNED = (
    "rerun pinned to the GPU's NUMA node (`nvidia-smi topo -m` names it; numactl "
    "--cpunodebind=N --membind=N); if it stays low: " + REMEDY
)


@dataclass(frozen=True)
class CopyFigure:
    """One GPU's measured copy bandwidth (GB/s, 10^9 bytes/s; medians over the repeats)."""

    h2d_gbs: float
    d2h_gbs: float
    size_bytes: int
    repeats: int
    #: True: measured from the GPU's NUMA-local CPUs; False/None: not pinned there / unknown
    numa_local: bool | None = None

    @property
    def gbs(self) -> float:
        """The figure judged: the lower direction."""
        return min(self.h2d_gbs, self.d2h_gbs)

    def describe(self) -> str:
        mib = self.size_bytes / (1 << 20)
        where = {
            True: "NUMA-local CPUs",
            False: "not pinned to its NUMA node",
            None: "NUMA unknown",
        }
        return (
            f"host<->device copy of {mib:g} MiB pinned (median of {self.repeats}, "
            f"{where[self.numa_local]}): H2D {self.h2d_gbs:.1f} GB/s, D2H {self.d2h_gbs:.1f} GB/s"
        )

    def to_dict(self) -> dict[str, object]:
        return {"h2d_gbs": round(self.h2d_gbs, 3), "d2h_gbs": round(self.d2h_gbs, 3),
                "gbs": round(self.gbs, 3), "size_bytes": self.size_bytes,
                "repeats": self.repeats, "numa_local": self.numa_local}  # fmt: skip


def gbs(size_bytes: int, seconds: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second) of moving ``size_bytes`` in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"a copy cannot take {seconds!r} s")
    return size_bytes / seconds / 1e9


def measurement_failed(gpu: GpuReading, error: str) -> Record:
    """The copy could not be measured (CUDA error, out of memory): incomplete, not failed."""
    return rec(
        HOST_DEVICE_COPY, "incomplete", f"the copy measurement failed: {error}", gpu=gpu,
        remedy="rerun the checks; if it keeps failing, see torch_cuda_available and the "
        "kernel log (Xid) for this GPU",
    )  # fmt: skip


def host_device_copy(
    gpu: GpuReading,
    figure: CopyFigure | None,
    floor: float | None,
    profile: str | None,
    why_not: str = "",
) -> Record:
    """The verdict of one GPU. ``floor``: the profile's ``floors.host_device_copy_gbs``
    (None: null in the profile, or no profile: ``profile`` None); ``why_not``: why there is no
    ``figure`` (a skip)."""
    if (bad := gpu_unreadable(HOST_DEVICE_COPY, gpu)) is not None:
        return bad
    if figure is None:
        return rec(HOST_DEVICE_COPY, "skip", f"not measured: {why_not or 'no figure'}", gpu=gpu)
    value = round(figure.gbs, 2)
    if profile is None:
        return rec(
            HOST_DEVICE_COPY, "pass",
            f"{figure.describe()}; no system profile chosen (see the profile check): not "
            "judged against a floor", gpu=gpu, value=value,
        )  # fmt: skip
    if floor is None:
        return rec(
            HOST_DEVICE_COPY, "pass", f"{figure.describe()}; no floor in profile {profile}",
            gpu=gpu, value=value,
        )  # fmt: skip
    if figure.gbs >= floor:
        return rec(
            HOST_DEVICE_COPY, "pass",
            f"{figure.describe()}; min {value} GB/s >= floor {floor:g} GB/s (profile {profile})",
            gpu=gpu, value=value, threshold=floor,
        )  # fmt: skip
    below = (
        f"{figure.describe()}; min {value} GB/s below the floor {floor:g} GB/s (profile {profile})"
    )
    if figure.numa_local:
        return rec(HOST_DEVICE_COPY, "fail", f"{below}.", gpu=gpu, value=value,
                   threshold=floor, remedy=REMEDY)  # fmt: skip
    return rec(
        HOST_DEVICE_COPY, "warn",
        f"{below}, measured without pinning to the GPU's NUMA-local CPUs.", gpu=gpu,
        value=value, threshold=floor, remedy=REMEDY_UNPINNED,
    )  # fmt: skip
