"""Driver and node checks: NVML up, driver and CUDA versions, nouveau, GPU count, persistence."""

from __future__ import annotations

from collections.abc import Iterable

from gpufleet.node.health._common import gpu_unreadable, rec, unsupported, version_tuple
from gpufleet.node.health.names import (
    CUDA_DRIVER_VERSION,
    DRIVER_LOADED,
    DRIVER_VERSION,
    GPU_COUNT,
    NOUVEAU,
    PERSISTENCE,
)
from gpufleet.node.nvml import GpuReading, NodeReading, cuda_int_to_str
from gpufleet.results import Record


def driver_loaded(reading: NodeReading) -> Record:
    return rec(
        DRIVER_LOADED,
        "pass",
        f"NVML initialised: driver {reading.driver_version}, {len(reading.gpus)} GPU(s)",
        value=reading.driver_version,
    )


def driver_version(reading: NodeReading, min_driver: str | None) -> Record:
    if not min_driver:
        return rec(
            DRIVER_VERSION, "skip",
            f"no plan driver floor to compare with (driver {reading.driver_version}); "
            "pass --min-driver or provision with a manifest",
            value=reading.driver_version,
        )  # fmt: skip
    ok = version_tuple(reading.driver_version) >= version_tuple(min_driver)
    return rec(
        DRIVER_VERSION,
        "pass" if ok else "fail",
        f"driver {reading.driver_version} "
        + (f">= {min_driver}" if ok else f"is older than the plan's floor {min_driver}."),
        value=reading.driver_version,
        threshold=f">= {min_driver}",
        remedy=f"install a driver >= {min_driver} (role nvidia_driver; plan driver_branch)",
    )


def cuda_driver_version(reading: NodeReading, wheel_cuda: str | None) -> Record:
    """NVML's CUDA driver version against the torch wheel's CUDA runtime.

    Lower major: the wheel cannot run → fail. Same major, lower minor: it runs under CUDA
    minor-version compatibility (driver >= the plan's min_driver) without PTX JIT → warn.
    """
    have = cuda_int_to_str(reading.cuda_driver_version)
    if have is None:
        return rec(CUDA_DRIVER_VERSION, "skip", "NVML reports no CUDA driver version")
    if not wheel_cuda:
        return rec(
            CUDA_DRIVER_VERSION, "skip",
            f"the torch wheel has no CUDA (CPU build or torch missing); driver has CUDA {have}",
            value=have,
        )  # fmt: skip
    have_t, want_t = version_tuple(have), version_tuple(wheel_cuda)
    threshold = f">= {wheel_cuda}"
    remedy = (
        f"upgrade the driver to a branch supporting CUDA {wheel_cuda} (role nvidia_driver), "
        "or plan a wheel variant for this driver (gpufleet plan --driver ...)"
    )
    if have_t >= want_t:
        return rec(
            CUDA_DRIVER_VERSION, "pass", f"driver supports CUDA {have} >= wheel CUDA {wheel_cuda}",
            value=have, threshold=threshold,
        )  # fmt: skip
    if have_t[:1] == want_t[:1]:
        return rec(
            CUDA_DRIVER_VERSION,
            "warn",
            f"driver supports CUDA {have}, older than the wheel's CUDA {wheel_cuda}: it runs "
            "under CUDA minor-version compatibility only (no PTX JIT, some APIs missing).",
            value=have, threshold=threshold, remedy=remedy,
        )  # fmt: skip
    return rec(
        CUDA_DRIVER_VERSION,
        "fail",
        f"driver supports CUDA {have}, the torch wheel needs CUDA {wheel_cuda} "
        "(\"driver too old\").",
        value=have, threshold=threshold, remedy=remedy,
    )  # fmt: skip


def nouveau(modules: Iterable[str]) -> Record:
    loaded = "nouveau" in set(modules)
    return rec(
        NOUVEAU,
        "fail" if loaded else "pass",
        "kernel module nouveau is loaded; the NVIDIA driver cannot bind the GPUs."
        if loaded
        else "nouveau not loaded",
        value="loaded" if loaded else "not loaded",
        threshold="not loaded",
        remedy="blacklist nouveau (/etc/modprobe.d/blacklist-nouveau.conf: blacklist nouveau, "
        "options nouveau modeset=0), `dracut -f`, reboot (role nvidia_driver does this)",
    )


def gpu_count(reading: NodeReading, expected: int | None, pci_gpus: int | None) -> Record:
    have = len(reading.gpus)
    if expected is not None:
        ok = have == expected
        return rec(
            GPU_COUNT,
            "pass" if ok else "fail",
            f"NVML sees {have} GPU(s), expected {expected}."
            + ("" if ok or pci_gpus is None else f" The PCI bus shows {pci_gpus}."),
            value=have,
            threshold=f"== {expected}",
            remedy="check `lspci -d 10de:` and `journalctl -k | grep Xid` (Xid 79: GPU fell "
            "off the bus); reseat/RMA the missing GPU, or correct gpufleet_gpus_expected",
        )
    if have == 0:
        return rec(
            GPU_COUNT, "fail", "NVML sees no GPU.", value=0, threshold="> 0",
            remedy="check `lspci -d 10de:` and the kernel log",
        )  # fmt: skip
    if pci_gpus is not None and pci_gpus > have:
        return rec(
            GPU_COUNT,
            "warn",
            f"NVML sees {have} GPU(s) but the PCI bus shows {pci_gpus} NVIDIA GPUs (normal in "
            "a container given a subset of GPUs; on bare metal a GPU is missing).",
            value=have,
            threshold=f"== {pci_gpus} (PCI)",
            remedy="on bare metal: check Xid 79 in the kernel log and reseat/RMA; "
            "set gpus_expected to make this exact",
        )
    return rec(GPU_COUNT, "pass", f"NVML sees {have} GPU(s)", value=have, threshold="> 0")


def persistence_mode(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(PERSISTENCE, gpu)) is not None:
        return bad
    if gpu.persistence_mode is None:
        return unsupported(PERSISTENCE, gpu, "persistence mode")
    on = gpu.persistence_mode
    return rec(
        PERSISTENCE,
        "pass" if on else "fail",
        "persistence mode on" if on else "persistence mode is off (value 0, required 1).",
        gpu=gpu,
        value=int(on),
        threshold=1,
        remedy="systemctl enable --now nvidia-persistenced (or nvidia-smi -pm 1)",
    )
