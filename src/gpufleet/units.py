"""Values as users write them: byte sizes (``64M``, ``1G``), booleans (``TRUE``, ``off``) and
systemd time spans (``5min``); the one parser of each, for inputs, options, make variables
and reports."""

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


#: systemd.time(7) time span units, in seconds ("5min", "1h 30min", a bare number: seconds).
_TIMESPAN_UNITS: dict[str, float] = {
    **dict.fromkeys(("us", "usec"), 1e-6),
    **dict.fromkeys(("ms", "msec"), 1e-3),
    **dict.fromkeys(("", "s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
    **dict.fromkeys(("w", "week", "weeks"), 604800.0),
}
TIMESPAN_ALLOWED = "a systemd time span such as 300, 90s, 5min or 1h 30min"


def parse_timespan(text: object) -> float:
    """``"5min"`` -> 300.0, ``"1h 30min"`` -> 5400.0, ``300`` -> 300.0: a systemd time span
    (systemd.time(7): a number and a unit, repeated; a bare number is seconds) in seconds.
    ValueError when it is not one. Months and years (uneven lengths) are not taken."""
    raw = str(text).strip() if isinstance(text, str | int) and not isinstance(text, bool) else ""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)\s*", raw)
    if not raw or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s+", "", raw):
        raise ValueError(f"{text!r} is not {TIMESPAN_ALLOWED}")
    total = 0.0
    for number, unit in parts:
        if unit not in _TIMESPAN_UNITS:
            raise ValueError(f"{text!r}: unknown unit {unit!r}; {TIMESPAN_ALLOWED}")
        total += float(number) * _TIMESPAN_UNITS[unit]
    return total


_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600}
#: the longest duration any gpufleet option takes (a week)
MAX_DURATION_S = 7 * 86400
DURATION_ALLOWED = "a whole number of seconds, or with a unit: 90s, 2m, 30m, 1h (1 s to 7 days)"


def parse_duration(text: str, name: str) -> int:
    """``"30m"`` -> 1800, ``"90s"``/``"90"`` -> 90, ``"1h"`` -> 3600; anything else (a
    negative, a fraction, another unit, over 7 days) is refused naming ``name``."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhSMH]?)\s*", str(text))
    if not m:
        raise RefusedError(f"{name}={text!r} is refused -> allowed: {DURATION_ALLOWED}")
    seconds = int(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]
    if not 1 <= seconds <= MAX_DURATION_S:
        raise RefusedError(f"{name}={text!r} is refused -> allowed: {DURATION_ALLOWED}")
    return seconds


#: Boolean spellings accepted wherever a user writes a yes/no value (make variables,
#: environment variables, options): any case, surrounding blanks ignored.
TRUE_WORDS = ("1", "true", "yes", "on", "y")
FALSE_WORDS = ("0", "false", "no", "off", "n")
BOOL_ALLOWED = f"{', '.join(TRUE_WORDS)} or {', '.join(FALSE_WORDS)} (any case)"


def parse_bool(text: str, name: str) -> bool:
    """``"TRUE"`` -> True, ``"off"`` -> False; any other spelling is refused naming ``name``
    (a typo such as ``ture`` must not silently mean false)."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise RefusedError(f"{name}={text!r} is refused -> allowed: {BOOL_ALLOWED}")


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufleet.units bool NAME VALUE``: prints ``1``, ``0``, or nothing for an
    empty VALUE (unset); ``python -m gpufleet.units duration NAME VALUE``: the seconds, or
    nothing for an empty VALUE. A refused spelling is one ERROR line and exit 2 (the
    Makefile's boolean and duration variables go through this)."""
    import sys  # noqa: PLC0415 - only for the command line

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in ("bool", "duration"):
        print("usage: python -m gpufleet.units bool|duration NAME VALUE", file=sys.stderr)
        return 2
    kind, name, value = args
    if value.strip() == "":
        return 0
    try:
        print(
            parse_duration(value, name)
            if kind == "duration"
            else "1"
            if parse_bool(value, name)
            else "0"
        )
    except RefusedError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
