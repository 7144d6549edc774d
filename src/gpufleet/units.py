"""Byte sizes as users write them (``64M``, ``1G``): the one parser, for inputs and reports."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.errors import RefusedError

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(text: str) -> int:
    """``"64M"`` -> 67108864. Units K/M/G are powers of 1024 (as nccl-tests -b/-e)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise RefusedError(f"cannot read size {text!r}; write e.g. 4096, 64K, 16M or 1G")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value <= 0:
        raise RefusedError(f"size must be > 0, got {text!r}")
    return value


def parse_sizes(text: str | Iterable[str]) -> list[int]:
    """Comma separated list of sizes -> sorted unique byte counts."""
    items = text.split(",") if isinstance(text, str) else list(text)
    sizes = sorted({parse_size(t) for t in items if str(t).strip()})
    if not sizes:
        raise RefusedError("no all-reduce sizes given")
    return sizes


def human_size(size_bytes: int) -> str:
    for unit, factor in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return f"{size_bytes}B"
