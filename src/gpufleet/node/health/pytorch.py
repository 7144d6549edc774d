"""PyTorch and CUDA toolkit checks: CUDA available, device count, arch list, versions."""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpufleet.node.facts import TorchFacts
from gpufleet.node.health._common import gpu_unreadable, rec, version_tuple
from gpufleet.node.health.names import (
    NCCL_VERSION,
    TOOLKIT,
    TORCH_ARCH,
    TORCH_COUNT,
    TORCH_CUDA,
    TORCH_CUDA_VERSION,
    VISIBLE_DEVICES,
)
from gpufleet.node.nvml import GpuReading
from gpufleet.planning.gpuarch import covers
from gpufleet.results import Record


def torch_cuda_available(tf: TorchFacts, wheel_variant: str | None) -> Record:
    if wheel_variant == "cpu":
        return rec(TORCH_CUDA, "skip", "the plan installed the CPU wheel (variant cpu)")
    if tf.cuda_available:
        return rec(TORCH_CUDA, "pass", f"torch {tf.version} sees CUDA", value=True)
    why = tf.error or (
        "the wheel is a CPU build" if tf.cuda is None else "torch.cuda.is_available() is False"
    )
    remedy = (
        "install the planned CUDA wheel (role torch_env; plan index_url)"
        if tf.cuda is None
        else "check the driver supports the wheel's CUDA (cuda_driver_version), "
        "/dev/nvidia* permissions and CUDA_VISIBLE_DEVICES"
    )
    return rec(
        TORCH_CUDA, "fail", f"torch {tf.version or '(missing)'} cannot use CUDA: {why}.",
        value=False, threshold=True, remedy=remedy,
    )  # fmt: skip


def torch_device_count(tf: TorchFacts, nvml_count: int, visible: list[str] | None) -> Record:
    if not tf.cuda_available:
        return rec(TORCH_COUNT, "skip", "torch cannot use CUDA (see torch_cuda_available)")
    expected = nvml_count if visible is None else min(len(visible), nvml_count)
    what = "NVML's count" if visible is None else "the CUDA_VISIBLE_DEVICES count"
    ok = tf.device_count == expected
    return rec(
        TORCH_COUNT,
        "pass" if ok else "fail",
        f"torch sees {tf.device_count} GPU(s), {what} is {expected}" + ("" if ok else "."),
        value=tf.device_count,
        threshold=f"== {expected}",
        remedy="check CUDA_VISIBLE_DEVICES, cgroup device access (/dev/nvidia*) and "
        "`nvidia-smi`; a GPU NVML sees but CUDA cannot open is often faulty",
    )


def torch_arch(gpu: GpuReading, tf: TorchFacts) -> Record:
    if (bad := gpu_unreadable(TORCH_ARCH, gpu)) is not None:
        return bad
    if tf.cuda is None:
        return rec(TORCH_ARCH, "skip", "the torch wheel is a CPU build", gpu=gpu)
    if gpu.compute_capability is None:
        return rec(TORCH_ARCH, "skip", "compute capability unknown", gpu=gpu)
    cc = gpu.compute_capability
    sm = f"sm_{cc[0]}{cc[1]}"
    how = covers(cc, tf.arch_list)
    value = f"{cc[0]}.{cc[1]}"
    threshold = list(tf.arch_list)
    if how is None:
        return rec(
            TORCH_ARCH, "fail",
            f"compute capability {value} ({sm}) is not in the wheel's arch list "
            f"{list(tf.arch_list)} (torch {tf.version}).",
            gpu=gpu, value=value, threshold=threshold,
            remedy=f"plan a torch release / variant that builds {sm} "
            f"(gpufleet plan --gpu-arch {sm}); old GPUs need older wheels",
        )  # fmt: skip
    return rec(
        TORCH_ARCH, "pass", f"{sm} covered by {how}", gpu=gpu, value=value, threshold=threshold
    )


def torch_cuda_version(tf: TorchFacts, plan_cuda: str | None, wheel_variant: str | None) -> Record:
    if tf.error and tf.error.startswith("import torch failed"):
        return rec(
            TORCH_CUDA_VERSION, "fail", f"{tf.error}.", value=None, threshold=plan_cuda,
            remedy="install the planned torch into the env (role torch_env)",
        )  # fmt: skip
    if wheel_variant == "cpu":
        expected: str | None = None
    elif plan_cuda:
        expected = plan_cuda
    else:
        return rec(
            TORCH_CUDA_VERSION, "skip",
            f"no plan CUDA to compare with (torch.version.cuda = {tf.cuda}); "
            "pass --expect-cuda or provision with a manifest",
            value=tf.cuda,
        )  # fmt: skip
    ok = (tf.cuda or None) == expected or (
        tf.cuda is not None
        and expected is not None
        and version_tuple(tf.cuda)[:2] == version_tuple(expected)[:2]
    )
    return rec(
        TORCH_CUDA_VERSION,
        "pass" if ok else "fail",
        f"torch {tf.version}: torch.version.cuda = {tf.cuda}, plan expects {expected}"
        + ("" if ok else "."),
        value=tf.cuda,
        threshold=expected,
        remedy="reinstall torch from the plan's index URL (role torch_env); a pip cache or "
        "mirror may have served another variant",
    )


def nccl_version(tf: TorchFacts, plan_nccl: str | None) -> Record:
    """Warn only: equality of the runtime NCCL with the plan is UNCONFIRMED (reference)."""
    if tf.cuda is None:
        return rec(NCCL_VERSION, "skip", "the torch wheel is a CPU build (no NCCL)")
    if tf.nccl is None:
        return rec(
            NCCL_VERSION, "warn", "torch reports no NCCL version.", value=None,
            threshold=plan_nccl, remedy="install a torch CUDA wheel built with NCCL",
        )  # fmt: skip
    if not plan_nccl:
        return rec(
            NCCL_VERSION, "skip",
            f"no plan NCCL to compare with (torch NCCL {tf.nccl}); pass --expect-nccl",
            value=tf.nccl,
        )  # fmt: skip
    ok = version_tuple(tf.nccl) == version_tuple(plan_nccl)
    return rec(
        NCCL_VERSION,
        "pass" if ok else "warn",
        f"torch NCCL {tf.nccl}, plan {plan_nccl}" + ("" if ok else "."),
        value=tf.nccl,
        threshold=plan_nccl,
        remedy="check which nvidia-nccl-cu* wheel pip resolved (pip show nvidia-nccl-cu12) "
        "and whether LD_LIBRARY_PATH / LD_PRELOAD injects another libnccl",
    )


def cuda_visible_devices(tf: TorchFacts, visible: list[str] | None, nvml_count: int) -> Record:
    if visible is None:
        return rec(VISIBLE_DEVICES, "skip", "CUDA_VISIBLE_DEVICES is not set")
    if not tf.cuda_available and visible:
        return rec(VISIBLE_DEVICES, "skip", "torch cannot use CUDA (see torch_cuda_available)")
    expected = min(len(visible), nvml_count)
    ok = tf.device_count == expected
    return rec(
        VISIBLE_DEVICES,
        "pass" if ok else "fail",
        f"CUDA_VISIBLE_DEVICES={','.join(visible)} lists {len(visible)} device(s); torch "
        f"sees {tf.device_count}" + ("" if ok else "."),
        value=tf.device_count,
        threshold=f"== {expected}",
        remedy="check the entries (indices or GPU-UUIDs from `nvidia-smi -L`); CUDA stops at "
        "the first invalid one",
    )


def toolkit(nvcc: str | None, release: str | None, plan_toolkit: str | None) -> Record:
    if nvcc is None:
        return rec(TOOLKIT, "skip", "CUDA toolkit not installed (no nvcc)")
    if release is None:
        return rec(
            TOOLKIT, "fail", f"`{nvcc} --version` printed no release.", value=None,
            threshold=plan_toolkit, remedy="reinstall the toolkit (role cuda_toolkit)",
        )  # fmt: skip
    if not plan_toolkit:
        return rec(
            TOOLKIT, "skip", f"no plan toolkit to compare with ({nvcc}: release {release})",
            value=release,
        )  # fmt: skip
    ok = version_tuple(release)[:2] == version_tuple(plan_toolkit)[:2]
    return rec(
        TOOLKIT,
        "pass" if ok else "fail",
        f"{nvcc}: release {release}, plan {plan_toolkit}" + ("" if ok else "."),
        value=release,
        threshold=plan_toolkit,
        remedy="install the plan's toolkit_package (role cuda_toolkit) and point "
        "/usr/local/cuda at it (alternatives --config cuda)",
    )


def toolkit_from_plan(plan: Mapping[str, object]) -> str | None:
    """ "12.8" from the plan's toolkit_prefix (/usr/local/cuda-12.8) or toolkit_package."""
    for key in ("toolkit_prefix", "toolkit_package"):
        raw = plan.get(key)
        if isinstance(raw, str):
            m = re.search(r"cuda-(?:toolkit-)?(\d+)[.-](\d+)$", raw.rstrip("/"))
            if m:
                return f"{m[1]}.{m[2]}"
    return None
