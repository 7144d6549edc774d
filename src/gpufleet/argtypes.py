"""argparse ``type=`` helpers shared by every sub-command and the checks suite.

A bad value raises ``argparse.ArgumentTypeError``: argparse then prints one usage line and
``argument --port: invalid port value: '70000' (allowed: an integer 1-65535)`` and exits 2;
no traceback. The same functions validate pytest options of checks/ (conftest), where
pytest turns the error into a usage error at start.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from gpufleet.errors import RefusedError
from gpufleet.inputs.boundary import MAX_VALUE_LEN, is_single_line
from gpufleet.units import DURATION_ALLOWED, parse_duration
from gpufleet.verify import tiers


def _bad(value: str, allowed: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"{value!r} (allowed: {allowed})")


def int_range(lo: int, hi: int) -> Callable[[str], int]:
    """An integer in [lo, hi]."""

    def parse(value: str) -> int:
        try:
            num = int(value, 10)
        except (TypeError, ValueError):
            raise _bad(value, f"an integer {lo}-{hi}") from None
        if not lo <= num <= hi:
            raise _bad(value, f"an integer {lo}-{hi}")
        return num

    parse.__name__ = "integer"
    return parse


def float_range(lo: float, hi: float, lo_open: bool = False) -> Callable[[str], float]:
    """A finite number in [lo, hi] (``(lo, hi]`` with lo_open); nan and inf are refused."""
    what = f"a number {'>' if lo_open else '>='} {lo:g} and <= {hi:g}"

    def parse(value: str) -> float:
        try:
            num = float(value)
        except (TypeError, ValueError):
            raise _bad(value, what) from None
        if not math.isfinite(num) or num > hi or num < lo or (lo_open and num == lo):
            raise _bad(value, what)
        return num

    parse.__name__ = "number"
    return parse


port = int_range(1, 65535)
port.__name__ = "port"
timeout_s = float_range(0, 86400, lo_open=True)
timeout_s.__name__ = "timeout"
retries = int_range(0, 1000)
count = int_range(0, 1_000_000)
hours = float_range(0, 24 * 365, lo_open=True)
hours.__name__ = "hours"


def driver_version(value: str) -> str:
    """An NVIDIA driver version: 580, 570.86 or 570.86.15."""
    if re.fullmatch(r"[0-9]{3}(\.[0-9]{1,3}){0,2}", value) is None:
        raise _bad(value, "a driver version such as 570.86.15 or 580")
    return value


def dotted_version(parts: str) -> Callable[[str], str]:
    """X.Y (``parts='X.Y'``) or X.Y.Z versions of digits."""
    n = parts.count(".")

    def parse(value: str) -> str:
        if re.fullmatch(r"[0-9]{1,4}(\.[0-9]{1,4}){" + str(n) + ",2}", value) is None:
            raise _bad(value, f"a version {parts}")
        return value

    parse.__name__ = "version"
    return parse


def wheel_variant(value: str) -> str:
    if re.fullmatch(r"cu[0-9]{3}|cpu", value) is None:
        raise _bad(value, "cuXXX (e.g. cu128) or cpu")
    return value


def text(value: str) -> str:
    """One line of printable characters (names, paths)."""
    if not is_single_line(value, MAX_VALUE_LEN):
        raise _bad(value, f"one line of at most {MAX_VALUE_LEN} printable characters")
    return value


def duration(value: str) -> int:
    """Seconds from ``90``, ``90s``, ``2m``, ``30m``, ``1h`` (gpufleet.units.parse_duration)."""
    try:
        return parse_duration(value, "duration")
    except RefusedError:
        raise _bad(value, DURATION_ALLOWED) from None


def tier(value: str) -> str:
    """A verify tier: quick, standard or burnin (gpufleet.verify.tiers; docs/verify.md)."""
    if value not in tiers.NAMES:
        raise _bad(value, " or ".join(tiers.NAMES))
    return value
