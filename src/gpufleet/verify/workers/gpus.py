"""How many ranks a node's launch gets: ``python -m gpufleet.verify.workers.gpus`` prints the number
of NVIDIA GPUs of the node (0: a CPU node), after checking that the env has torch.

verify runs it on every node before the cluster steps (roles/verify/tasks/prepare.yml). It
used to ask torch (``import torch; torch.cuda.device_count()``), which costs 2-4 s of CPU per
node before anything is launched. This asks the driver instead, through NVML (the node checks'
source too), and falls back to the driver's /proc entries when NVML cannot be loaded. A GPU
node whose torch cannot use CUDA is therefore launched in GPU mode and fails there with
CUDA's own error, instead of being quietly verified as a CPU node with gloo.

Exit 0 with the count on stdout (with ``--package-digest`` a second line ``gpufleet <digest>``
of this gpufleet package's files); exit 3 with a message on stderr when torch is not
installed in this interpreter.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

#: One directory per GPU (named by PCI bus id) while the NVIDIA kernel module is loaded.
PROC_GPUS = Path("/proc/driver/nvidia/gpus")


def nvml_count() -> int | None:
    """NVML's device count, or None when NVML cannot be loaded or initialised (no driver)."""
    try:
        import pynvml  # noqa: PLC0415 - lazy: CPU nodes may not have the library
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # any NVML error means: no usable driver here
        return None
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            pynvml.nvmlShutdown()


def proc_count(root: Path = PROC_GPUS) -> int:
    try:
        return sum(1 for p in root.iterdir() if p.is_dir())
    except OSError:
        return 0


def gpu_count(nvml: Callable[[], int | None] = nvml_count, root: Path = PROC_GPUS) -> int:
    counted = nvml()
    return counted if counted is not None else proc_count(root)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if importlib.util.find_spec("torch") is None:
        print(f"No module named 'torch' in {sys.executable}", file=sys.stderr)
        return 3
    print(gpu_count())
    if "--package-digest" in args:
        from gpufleet.provisioning.converge_digest import package_digest  # noqa: PLC0415 - only when asked

        print(f"gpufleet {package_digest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
