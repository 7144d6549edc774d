"""Parsing and comparison of the dotted versions gpufleet deals with.

Versions are compared as integer tuples, never as strings: "10" < "8" as strings is the
bug that sent EL10 down NVIDIA's EL7 code path (el-provisioning.md, pitfall 1).
"""

from __future__ import annotations

import re

Version = tuple[int, ...]

_DOTTED = re.compile(r"^\d+(\.\d+)*$")
_TORCH = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_BRANCH = r"\d{3}"
_DRIVER = re.compile(rf"^({_BRANCH})(\.\d{{1,3}}){{0,2}}$")
_PYTHON = re.compile(r"^3\.(\d{1,2})(\.\d+)?$")
_CUDA_VARIANT = r"cu(\d{2})(\d)"
_VARIANT = re.compile(rf"^{_CUDA_VARIANT}$")
# Every PyTorch wheel index variant torch_env may install: the planner's cpu / cuXYZ, and
# the ROCm and XPU builds an admin may choose by hand.
_WHEEL_VARIANT = re.compile(rf"^(cpu|{_CUDA_VARIANT}|rocm\d+(\.\d+){{0,2}}|xpu)$")


def parse(text: str) -> Version:
    """'12.8' -> (12, 8). Raises ValueError on anything but digits and dots."""
    text = text.strip()
    if not _DOTTED.match(text):
        raise ValueError(f"not a dotted version: {text!r}")
    return tuple(int(p) for p in text.split("."))


def fmt(version: Version) -> str:
    return ".".join(str(p) for p in version)


def cmp_key(version: Version, width: int = 4) -> Version:
    """Pad with zeros so that (580,) == (580, 0, 0) compares as equal."""
    return version + (0,) * (width - len(version))


def at_least(have: Version, need: Version) -> bool:
    return cmp_key(have) >= cmp_key(need)


def _match(pattern: re.Pattern[str], text: str, what: str) -> re.Match[str]:
    m = pattern.match(text.strip())
    if not m:
        raise ValueError(f"not {what}: {text!r}")
    return m


def is_torch_version(text: str) -> bool:
    return bool(_TORCH.match(text.strip()))


def torch_minor(text: str) -> str:
    """'2.11.0' -> '2.11'. Raises ValueError unless text is X.Y.Z."""
    m = _match(_TORCH, text, "a torch release version X.Y.Z")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def is_driver_version(text: str) -> bool:
    return bool(_DRIVER.match(text.strip()))


def is_driver_branch(text: str) -> bool:
    """'580' -> True (a branch as nvidia_driver_branch / the plan's driver_branch write it)."""
    return re.fullmatch(_BRANCH, text.strip()) is not None


def driver_branch(text: str) -> int:
    """'570.86.15' -> 570."""
    if not is_driver_version(text):
        raise ValueError(f"not an NVIDIA driver version like 570.86.15: {text!r}")
    return int(text.strip().split(".")[0])


def python_minor(text: str) -> str:
    """'3.11' or '3.11.7' -> '3.11'."""
    m = _match(_PYTHON, text, "a Python version like 3.11")
    return f"3.{int(m.group(1))}"


def is_cuda_variant(text: str) -> bool:
    return bool(_VARIANT.match(text))


def is_wheel_variant(text: str) -> bool:
    """cpu, cu128, rocm6.4, xpu: a variant directory of the PyTorch wheel index."""
    return bool(_WHEEL_VARIANT.match(text))


def variant_cuda(variant: str) -> str | None:
    """'cu126' -> '12.6', 'cu118' -> '11.8', 'cpu' -> None."""
    if variant == "cpu":
        return None
    m = _match(_VARIANT, variant, "a wheel variant like cu126 or cpu")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def cuda_variant(cuda: str) -> str:
    """'12.6' -> 'cu126'."""
    major, minor = parse(cuda)[:2]
    return f"cu{major}{minor}"
