"""Values as users write them: byte sizes (``64M``, ``1G``) and booleans (``TRUE``, ``off``);
the one parser of each, for inputs, options, make variables and reports."""

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
    empty VALUE (unset); a refused spelling is one ERROR line and exit 2 (the Makefile's
    boolean variables go through this)."""
    import sys  # noqa: PLC0415 - only for the command line

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "bool":
        print("usage: python -m gpufleet.units bool NAME VALUE", file=sys.stderr)
        return 2
    _, name, value = args
    if value.strip() == "":
        return 0
    try:
        print("1" if parse_bool(value, name) else "0")
    except RefusedError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
