"""Command-line entry point. Only parsing and dispatch live here; each sub-command is a
module under gpufleet.commands exposing ``register(subparsers)`` which sets ``func``.

Errors: a bad argument prints one ``ERROR`` line naming it and exits 2; a GpufleetError
reaching this level prints one ``ERROR`` paragraph on stderr and exits with its exit_code
(2 for refused input, 1 for failed checks or broken input files), and so does a file that
cannot be read or written (exit 1); ``-v`` adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from gpufleet import __version__
from gpufleet.errors import EXIT_FAILED, EXIT_REFUSED, GpufleetError

# Sub-command modules, imported lazily so that `gpufleet plan` never imports torch or NVML.
COMMANDS: tuple[str, ...] = (
    "plan",
    "lock",
    "matrix",
    "report",
    "probe",
    "nvml",
    "logs",
    "runid",
    "verify",
    "dcgm",
    "slurm",
    "health",
    "profile",
    "compute",
    "ibbw",
)


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one line on stderr naming the (sub-)command and the argument, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_REFUSED, f"ERROR: {self.prog}: {message} (see {self.prog} --help)\n")


def _with_default_subcommand(argv: list[str]) -> list[str]:
    """``gpufleet report RUN_DIR`` -> ``gpufleet report summary RUN_DIR``: a command module
    may name a DEFAULT_SUBCOMMAND used when the word after the command is none of its
    SUBCOMMANDS (nor --help)."""
    pos = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if pos is None or argv[pos] not in COMMANDS:
        return argv
    module = importlib.import_module(f"gpufleet.commands.cmd_{argv[pos]}")
    default = getattr(module, "DEFAULT_SUBCOMMAND", None)
    rest = argv[pos + 1 :]
    if default is None or not rest or rest[0] in (*module.SUBCOMMANDS, "-h", "--help"):
        return argv
    return [*argv[: pos + 1], default, *rest]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpufleet",
        description="Plan, provision and verify PyTorch distributed training on EL GPU nodes.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"gpufleet.commands.cmd_{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_with_default_subcommand(list(sys.argv[1:] if argv is None else argv)))
    try:
        rc: int = args.func(args)
    except GpufleetError as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:  # a file named on the command line cannot be read or written
        if args.verbose:
            traceback.print_exc()
        print(f"ERROR: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("ERROR: interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
