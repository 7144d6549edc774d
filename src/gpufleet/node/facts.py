"""Non-NVML facts the node checks need: the torch build, loaded kernel modules, the CUDA
toolkit's nvcc, NVIDIA GPUs on the PCI bus, CUDA_VISIBLE_DEVICES.

Each reader here touches the system; :mod:`gpufleet.node.health` turns the results into
verdicts. Every fact also has a JSON form so a recording can replay it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.node.xid import KernelLogUnavailable, pci_key, read_kernel_log

NVCC_DEFAULT = Path("/usr/local/cuda/bin/nvcc")
NVIDIA_PCI_VENDOR = "0x10de"
#: PCI classes of GPUs: 0x0300 VGA controller, 0x0302 3D controller (NVSwitches are 0x0680).
GPU_PCI_CLASSES = ("0x0300", "0x0302")


@dataclass(frozen=True)
class TorchFacts:
    """What the env's torch build says about CUDA on this node."""

    version: str
    cuda: str | None  # torch.version.cuda; None for CPU wheels
    cuda_available: bool
    device_count: int
    arch_list: tuple[str, ...]  # torch.cuda.get_arch_list(): sm_80, sm_90a, compute_90, ...
    nccl: str | None  # "2.28.9"
    capabilities: tuple[tuple[int, int], ...] = ()  # per torch device
    pci_bus_ids: tuple[str, ...] = ()  # per torch device, "0000:3b:00.0" when known
    error: str | None = None  # torch not importable, or CUDA init failed

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TorchFacts:
        return cls(
            version=str(data.get("version", "")),
            cuda=data.get("cuda"),
            cuda_available=bool(data.get("cuda_available", False)),
            device_count=int(data.get("device_count", 0)),
            arch_list=tuple(data.get("arch_list", ())),
            nccl=data.get("nccl"),
            capabilities=tuple((int(a), int(b)) for a, b in data.get("capabilities", ())),
            pci_bus_ids=tuple(data.get("pci_bus_ids", ())),
            error=data.get("error"),
        )


def read_torch_facts() -> TorchFacts:
    """Import torch and read its CUDA facts (creates no CUDA context)."""
    try:
        import torch  # noqa: PLC0415 (heavy import, only when the torch checks run)
    except Exception as exc:  # any import failure is a finding
        return TorchFacts("", None, False, 0, (), None, error=f"import torch failed: {exc}")
    cuda: str | None = torch.version.cuda
    nccl_mod: Any = torch.cuda.nccl
    nccl: str | None = None
    try:
        raw = nccl_mod.version()
        nccl = ".".join(str(p) for p in raw) if isinstance(raw, tuple) else _nccl_int(int(raw))
    except Exception:  # CPU builds have no NCCL
        nccl = None
    error: str | None = None
    caps: list[tuple[int, int]] = []
    buses: list[str] = []
    try:
        available = bool(torch.cuda.is_available())
        count = int(torch.cuda.device_count()) if available else 0
        arch = tuple(str(a) for a in torch.cuda.get_arch_list())
        for i in range(count):
            major, minor = torch.cuda.get_device_capability(i)
            caps.append((int(major), int(minor)))
            props: Any = torch.cuda.get_device_properties(i)
            if hasattr(props, "pci_bus_id"):
                dom = int(getattr(props, "pci_domain_id", 0))
                buses.append(
                    f"{dom:04x}:{int(props.pci_bus_id):02x}:{int(props.pci_device_id):02x}.0"
                )
    except Exception as exc:  # CUDA init errors are findings
        available, count, arch, error = False, 0, (), f"CUDA initialisation failed: {exc}"
    return TorchFacts(
        version=str(torch.__version__),
        cuda=cuda,
        cuda_available=available,
        device_count=count,
        arch_list=arch,
        nccl=nccl,
        capabilities=tuple(caps),
        pci_bus_ids=tuple(buses),
        error=error,
    )


def torch_index_for(pci_bus_id: str, tf: TorchFacts) -> int | None:
    """The torch device index of the GPU at ``pci_bus_id`` (NVML spelling), or None.

    NVML enumerates in PCI order, CUDA fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
    and CUDA_VISIBLE_DEVICES renumbers: only the PCI bus id maps one to the other.
    """
    if not tf.cuda_available:
        return None
    key = pci_key(pci_bus_id)
    if key is None:
        return None
    return next((i for i, bus in enumerate(tf.pci_bus_ids) if pci_key(bus) == key), None)


def _nccl_int(v: int) -> str:
    """Old torch returned NCCL_VERSION_CODE: 2.18.3 → 21803 (>= 2.9), 2.8.4 → 2804."""
    if v >= 10000:
        return f"{v // 10000}.{(v // 100) % 100}.{v % 100}"
    return f"{v // 1000}.{(v // 100) % 10}.{v % 100}"


def loaded_modules(proc_modules: Path = Path("/proc/modules")) -> tuple[str, ...]:
    """Names of loaded kernel modules (first column of /proc/modules)."""
    try:
        text = proc_modules.read_text(encoding="utf-8")
    except OSError:
        return ()
    return tuple(line.split()[0] for line in text.splitlines() if line.strip())


def nvcc_path(toolkit_prefix: str | None) -> Path | None:
    """The nvcc to check: the plan's toolkit prefix first, then /usr/local/cuda."""
    candidates = [Path(toolkit_prefix) / "bin" / "nvcc"] if toolkit_prefix else []
    candidates.append(NVCC_DEFAULT)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def nvcc_release(nvcc: Path, timeout_s: float = 30.0) -> str | None:
    """ "12.8" from ``nvcc --version`` ("Cuda compilation tools, release 12.8, V12.8.93")."""
    try:
        proc = subprocess.run(
            [str(nvcc), "--version"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_nvcc_release(proc.stdout)


def parse_nvcc_release(text: str) -> str | None:
    m = re.search(r"release (\d+\.\d+)", text)
    return m[1] if m else None


def pci_nvidia_gpus(sysfs: Path = Path("/sys/bus/pci/devices")) -> int | None:
    """NVIDIA GPUs on the PCI bus (vendor 0x10de, class VGA/3D), None if sysfs is absent."""
    if not sysfs.is_dir():
        return None
    count = 0
    for dev in sysfs.iterdir():
        try:
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and klass[:6] in GPU_PCI_CLASSES:
            count += 1
    return count


def visible_devices(env: Mapping[str, str] | None = None) -> list[str] | None:
    """Entries of CUDA_VISIBLE_DEVICES, or None when it is unset.

    CUDA stops at the first invalid entry; an empty value hides every GPU.
    """
    env = os.environ if env is None else env
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [p.strip() for p in raw.split(",") if p.strip()]


def record_facts(kernel_log_hours: float = 24.0) -> dict[str, Any]:
    """The non-NVML sections of a recording (see docs/checks.md), read from this machine.

    Only NVRM lines of the kernel log are kept (Xids and driver messages, nothing else).
    """
    tf = read_torch_facts()
    nvcc = nvcc_path(None)
    try:
        lines, _ = read_kernel_log(kernel_log_hours)
    except KernelLogUnavailable:
        lines = []
    return {
        "torch": {
            "version": tf.version,
            "cuda": tf.cuda,
            "cuda_available": tf.cuda_available,
            "device_count": tf.device_count,
            "arch_list": list(tf.arch_list),
            "nccl": tf.nccl,
            "capabilities": [list(c) for c in tf.capabilities],
            "pci_bus_ids": list(tf.pci_bus_ids),
            "error": tf.error,
        },
        "proc_modules": list(loaded_modules()),
        "pci_nvidia_gpus": pci_nvidia_gpus(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvcc": None if nvcc is None else {"path": str(nvcc), "release": nvcc_release(nvcc)},
        "kernel_log": [line for line in lines if "NVRM" in line],
    }
