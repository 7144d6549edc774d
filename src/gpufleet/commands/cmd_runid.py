"""``gpufleet runid [--reports DIR] [--] [RUN_ID]``: print the run id of a ``make verify``
and claim ``DIR/<run-id>/`` (gpufleet.verify.run_id); exit 2 with one ERROR line on a refused id."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpufleet.commands import add_command
from gpufleet.verify import run_id as runid


def register(sub: Any) -> None:
    p = add_command(
        sub, "runid", "validate or make a make-verify run id and claim its folder", runid.__doc__
    )
    p.add_argument("--reports", default="reports", help="reports folder (default reports)")
    p.add_argument("run_id", nargs="?", default="", help="wanted run id (default: a new one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(runid.claim(Path(args.reports), args.run_id))
    return 0
