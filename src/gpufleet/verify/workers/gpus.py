"""How many ranks a node's launch gets: ``python -m gpufleet.verify.workers.gpus`` prints the number
of NVIDIA GPUs the node's ranks will see (0: a CPU node), after checking that the env has torch.

verify runs it on every node before the cluster steps (roles/verify/tasks/prepare.yml). It
used to ask torch (``import torch; torch.cuda.device_count()``), which costs 2-4 s of CPU per
node before anything is launched. This asks the driver instead, through NVML (the node checks'
source too), and falls back to the driver's /proc entries when NVML cannot be loaded. A GPU
node whose torch cannot use CUDA is therefore launched in GPU mode and fails there with
CUDA's own error, instead of being quietly verified as a CPU node with gloo.

The driver counts every GPU; CUDA (so torch, so each rank) sees only those that
CUDA_VISIBLE_DEVICES names, read from the environment the ranks get: this process's, with
``--env-file`` (verify_env_file, /etc/gpufleet/nccl.env: gpufleet.verify.workers.supervise
adds it the same way) on top. Its rules, as CUDA documents them
(https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html):
unset: every GPU; empty: none; a comma-separated list of GPU indices (``0,1``), GPU UUIDs
(``GPU-8932f937-...``; a prefix that names one GPU is enough) or MIG device UUIDs
(``MIG-...``, each one device), read up to the first entry that is none of these (``-1``,
``abc``): that entry and the ones after it are ignored. Where CUDA would also stop quietly at
an index or UUID that names no device of the node, or take one GPU twice, this refuses (exit 4,
one line naming the node, the variable, its value and what to do): the node would run fewer
ranks than its owner meant, or two ranks on one GPU, which NCCL refuses. A node without NVIDIA
GPUs counts 0 whatever the variable says. GPU UUIDs are checked against NVML, else against
the ``GPU UUID`` lines of /proc/driver/nvidia/gpus/*/information; MIG devices are known to
NVML only, so without it a MIG entry is refused rather than counted unchecked.

Exit 0 with the count on stdout (with ``--package-digest`` a second line ``gpufleet <digest>``
of this gpufleet package's files); exit 3 with a message on stderr when torch is not
installed in this interpreter; exit 4 when CUDA_VISIBLE_DEVICES names no GPU of this node.
The module imports the standard library only (pynvml when present, gpufleet's env file reader
with ``--env-file``): the torch check must work in an env that has nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: One directory per GPU (named by PCI bus id) while the NVIDIA kernel module is loaded.
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
VISIBLE = "CUDA_VISIBLE_DEVICES"
EXIT_NO_TORCH = 3
EXIT_NOT_VISIBLE = 4

_INDEX = re.compile(r"-?[0-9]+")


@dataclass(frozen=True)
class Devices:
    """The node's NVIDIA GPUs as the driver lists them (index order of the list = GPU index)."""

    count: int
    #: each GPU's UUID (``GPU-...``); None when they cannot be read
    gpu_uuids: tuple[str, ...] | None
    #: the UUIDs (``MIG-...``) of the MIG devices and their GPU's index; None without NVML
    mig_uuids: tuple[tuple[str, int], ...] | None
    source: str


class NotVisibleError(ValueError):
    """CUDA_VISIBLE_DEVICES names a device this node does not have (the message says which)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig_devices(nv: Any, handle: Any, gpu: int) -> list[tuple[str, int]]:
    """The MIG devices of one GPU ([] when MIG is off or not supported there)."""
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
        if int(current) != 1:
            return []
        slots = int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))
    except Exception:  # NOT_SUPPORTED on GPUs without MIG, or an older pynvml
        return []
    found: list[tuple[str, int]] = []
    for slot in range(slots):
        try:  # an empty slot answers NOT_FOUND
            found.append(
                (
                    _text(
                        nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
                    ),
                    gpu,
                )
            )
        except Exception:
            continue
    return found


def nvml_devices(nv: Any = None) -> Devices | None:
    """The GPUs, their UUIDs and MIG devices through NVML; None when NVML cannot be loaded or
    initialised (no driver). ``nv``: the pynvml module (tests pass a fake)."""
    if nv is None:
        try:
            import pynvml  # noqa: PLC0415 - lazy: CPU nodes may not have the library
        except ImportError:
            return None
        nv = pynvml
    try:
        nv.nvmlInit()
    except Exception:  # any NVML error means: no usable driver here
        return None
    try:
        count = int(nv.nvmlDeviceGetCount())
        uuids: list[str] | None = []
        migs: list[tuple[str, int]] = []
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except Exception:  # a lost GPU still counts (as before); its UUID is unknown
                uuids = None
                continue
            if uuids is not None:
                uuids.append(uuid)
            migs.extend(_mig_devices(nv, handle, i))
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):  # shutting down is best effort
            nv.nvmlShutdown()
    return Devices(count, None if uuids is None else tuple(uuids), tuple(migs), "NVML")


def proc_devices(root: Path = PROC_GPUS) -> Devices:
    """The GPUs of the driver's /proc entries (PCI bus order, as NVML numbers them), with the
    ``GPU UUID:`` line of each ``information`` file; no UUIDs when one cannot be read."""
    try:
        dirs = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        dirs = []
    uuids: list[str] = []
    for d in dirs:
        try:
            info = (d / "information").read_text(encoding="utf-8", errors="replace")
        except OSError:
            break
        uuid = next(
            (ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("GPU UUID:")),
            "",
        )
        if not uuid:
            break
        uuids.append(uuid)
    known = tuple(uuids) if len(uuids) == len(dirs) else None
    return Devices(len(dirs), known, None, str(root))


def node_devices(
    nvml: Callable[[], Devices | None] = nvml_devices, root: Path = PROC_GPUS
) -> Devices:
    found = nvml()
    return found if found is not None else proc_devices(root)


def _match(entry: str, known: Sequence[str]) -> list[int]:
    """Positions of ``known`` that ``entry`` names: the UUID or a prefix of it (CUDA's rule)."""
    return [i for i, u in enumerate(known) if u.startswith(entry)]


def _one(entry: str, what: str, known: Sequence[str]) -> int:
    hits = _match(entry, known)
    if not hits:
        listed = ", ".join(known) or "none"
        raise NotVisibleError(f"names {entry}, which is no {what} of this node ({what}s: {listed})")
    if len(hits) > 1:
        both = ", ".join(known[i] for i in hits)
        raise NotVisibleError(f"{entry} names {len(hits)} {what}s ({both}): give more of the UUID")
    return hits[0]


def _device(entry: str, devices: Devices) -> tuple[str, int | str] | None:
    """The device one entry names, as a key (``gpu``, index) or (``mig``, UUID); None for an
    entry CUDA takes as the end of the list."""
    if _INDEX.fullmatch(entry):
        index = int(entry)
        if index < 0:
            return None
        if index >= devices.count:
            raise NotVisibleError(
                f"names GPU index {index}, but this node has {devices.count} GPU(s) "
                f"(indices 0-{devices.count - 1}, counted by {devices.source})"
            )
        return ("gpu", index)
    if entry.startswith("GPU-"):
        if devices.gpu_uuids is None:
            raise NotVisibleError(
                f"names {entry}, and this node's GPU UUIDs cannot be read ({devices.source})"
            )
        return ("gpu", _one(entry, "GPU", devices.gpu_uuids))
    if entry.startswith("MIG-"):
        if devices.mig_uuids is None:
            raise NotVisibleError(
                f"names the MIG device {entry}; MIG devices are known to NVML only, which "
                "cannot be loaded here (install nvidia-ml-py in the env: make provision)"
            )
        legacy = entry.startswith("MIG-GPU-")  # MIG-GPU-<uuid>/<gi>/<ci> of drivers before R470
        if legacy:
            gpu = _one(entry[4:].split("/", 1)[0], "GPU", devices.gpu_uuids or ())
            if all(g != gpu for _u, g in devices.mig_uuids):
                raise NotVisibleError(f"names {entry}, but GPU {gpu} has no MIG devices")
            return ("mig", entry)
        mig_uuids = [u for u, _g in devices.mig_uuids]
        return ("mig", mig_uuids[_one(entry, "MIG device", mig_uuids)])
    return None


def visible_count(value: str | None, devices: Devices) -> int:
    """The GPUs CUDA will show under CUDA_VISIBLE_DEVICES=``value`` (None: unset).

    Raises NotVisibleError when an entry names no device of the node or one device twice.
    """
    if value is None or devices.count == 0:
        return devices.count
    seen: dict[tuple[str, int | str], str] = {}
    for raw in value.split(","):
        entry = raw.strip()
        key = _device(entry, devices)
        if key is None:
            break
        if key in seen:
            raise NotVisibleError(
                f"names one device twice ({seen[key]!r} and {entry!r}); NCCL refuses two ranks "
                "on one GPU"
            )
        seen[key] = entry
    return len(seen)


def ranks_environment(
    env_file: str, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """(CUDA_VISIBLE_DEVICES as the ranks get it, where it comes from): the env file's value
    when it sets one, else this process's environment's."""
    environ = os.environ if environ is None else environ
    if env_file and Path(env_file).is_file():
        from gpufleet.planning.network import read_env_file  # noqa: PLC0415 - only when asked

        extra = read_env_file(env_file)
        if VISIBLE in extra:
            return extra[VISIBLE], env_file
    return environ.get(VISIBLE), "the environment of the node's login session"


def refusal(node: str, value: str, source: str, problem: str, devices: Devices) -> str:
    """The one line that says what is wrong and what to do."""
    some = f"indices 0-{devices.count - 1} or UUIDs from `nvidia-smi -L`"
    return (
        f"{node}: {VISIBLE}={value!r} (from {source}) {problem} -> set {VISIBLE} in {source} "
        f"to GPUs of this node ({some}), or remove it there to use every GPU"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpufleet.verify.workers.gpus")
    parser.add_argument("--package-digest", action="store_true",
                        help="also print this gpufleet package's digest")  # fmt: skip
    parser.add_argument("--env-file", default="",
                        help="KEY=VALUE file the ranks get on top of this environment")  # fmt: skip
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if importlib.util.find_spec("torch") is None:
        print(f"No module named 'torch' in {sys.executable}", file=sys.stderr)
        return EXIT_NO_TORCH
    devices = node_devices()
    value, source = ranks_environment(args.env_file)
    try:
        count = visible_count(value, devices)
    except NotVisibleError as exc:
        print(
            refusal(socket.gethostname(), value or "", source, str(exc), devices), file=sys.stderr
        )
        return EXIT_NOT_VISIBLE
    print(count)
    if args.package_digest:
        from gpufleet.provisioning.converge_digest import package_digest  # noqa: PLC0415 - only when asked

        print(f"gpufleet {package_digest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
