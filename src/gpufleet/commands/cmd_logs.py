"""``gpufleet logs collect LOG_DIR DEST PREFIX`` | ``gpufleet logs first-error LOG``: the
rank logs of a failed launch (gpufleet.report.logscan), JSON on stdout.

``collect`` copies each rank's stdout/stderr from torchrun's ``--log-dir`` LOG_DIR to
``DEST/PREFIX-rank<N>.<stream>.log`` (head + tail, bounded) and prints one entry per copied
file with its first error line; ``first-error`` prints the first line of LOG that names the
cause (``null`` when none or when LOG is missing)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet.commands import add_command
from gpufleet.report import logscan


def register(sub: Any) -> None:
    p = add_command(sub, "logs", "copy and scan the rank logs of a failed launch", __doc__)
    lsub = p.add_subparsers(dest="logs_cmd", metavar="SUBCOMMAND", required=True)
    c = lsub.add_parser("collect", help="copy each rank's logs (bounded) with its first error")
    c.add_argument("log_dir", metavar="LOG_DIR", help="torchrun --log-dir of the launch")
    c.add_argument("dest", metavar="DEST", help="folder to copy the rank logs into")
    c.add_argument("prefix", metavar="PREFIX", help="file name prefix (the launch name)")
    c.set_defaults(func=run_collect)
    f = lsub.add_parser("first-error", help="the first line of a log that names the cause")
    f.add_argument("log", metavar="LOG")
    f.set_defaults(func=run_first_error)


def run_collect(args: argparse.Namespace) -> int:
    found = logscan.collect_rank_logs(Path(args.log_dir), Path(args.dest), args.prefix)
    print(json.dumps(found))
    return 0


def run_first_error(args: argparse.Namespace) -> int:
    err = logscan.first_error_in(Path(args.log))
    print(json.dumps(err.as_dict() if err else None))
    return 0
