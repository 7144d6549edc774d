"""Command-line entry point. Only parsing and dispatch live here; each sub-command is a
module under gpufleet.commands exposing ``register(subparsers)`` which sets ``func``.

Errors: a GpufleetError reaching this level prints one ``ERROR`` paragraph on stderr and
exits with its exit_code (2 for refused input, 1 for failed checks); ``-v`` adds the
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from gpufleet import __version__
from gpufleet.errors import GpufleetError

# Sub-command modules, imported lazily so that `gpufleet plan` never imports torch or NVML.
COMMANDS: tuple[str, ...] = ("plan", "matrix", "report", "probe")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Plan, provision and verify PyTorch distributed training on EL GPU nodes.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"gpufleet.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc: int = args.func(args)
    except GpufleetError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
