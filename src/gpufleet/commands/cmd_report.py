"""``gpufleet report``: aggregate a verify run, or read torchrun's root cause of a log.

gpufleet report summary reports/<run-id> [--run-info FILE|-] [--latest] [--no-plot] [--quiet]
    summary.json, summary.md, index.html (the page: gpufleet.report.page), junit.xml (one
    JUnit file for the cluster) and the table; exit 1 when any record failed or could not
    finish (incomplete) (docs/architecture.md). ``gpufleet report reports/<run-id>`` is the same.
    --run-info writes the run's description (a JSON object: run.json) into the run folder
    first; ``-`` reads it from stdin (roles/verify passes it so, in the same step).
gpufleet report root-cause LOG
    torchrun's "Root Cause (first observed failure)" of a launch log as one JSON
    object ({} when the log has none); used by roles/verify.
"""

# ruff: noqa: PLC0415  (the report package and jinja2 are imported lazily on purpose)

from __future__ import annotations

import argparse
import json
from typing import Any

from gpufleet.commands import add_command

# Sub-commands; ``gpufleet report RUN_DIR`` means ``gpufleet report summary RUN_DIR``.
SUBCOMMANDS = ("summary", "root-cause")
DEFAULT_SUBCOMMAND = "summary"


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "report",
        "aggregate a verify run into summary.json/md, index.html and junit.xml",
        __doc__,
    )
    rsub = p.add_subparsers(dest="report_cmd", metavar="SUBCOMMAND", required=True)
    s = rsub.add_parser(
        "summary", help="write summary.json/md, index.html, junit.xml; print the table"
    )
    s.add_argument("run_dir", help="reports/<run-id>")
    s.add_argument(
        "--run-info",
        metavar="FILE",
        help="write this JSON object as RUN_DIR/run.json first ('-': stdin)",
    )
    s.add_argument(
        "--no-plot", action="store_true", help="index.html without its pictures (inline SVG)"
    )
    s.add_argument("--latest", action="store_true", help="point reports/latest at RUN_DIR")
    s.add_argument("--quiet", action="store_true", help="no table on stdout")
    s.set_defaults(func=run_summary)
    r = rsub.add_parser(
        "root-cause",
        help="torchrun's root cause of a launch log, as JSON (the failing rank's "
        "error line from its stderr copy <log stem>-rank<N>.stderr.log beside it)",
    )
    r.add_argument("log", metavar="LOG", help="launcher output, e.g. <run dir>/allreduce.log")
    r.set_defaults(func=run_root_cause)


def _write_run_info(run_dir: str, source: str) -> None:
    """RUN_DIR/run.json from FILE or stdin: a JSON object, written whole or not at all."""
    import os
    import sys
    from pathlib import Path

    from gpufleet.errors import GpufleetError

    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    try:
        info = json.loads(text)
    except ValueError as exc:
        raise GpufleetError(f"--run-info {source}: not JSON ({exc})") from None
    if not isinstance(info, dict):
        raise GpufleetError(
            f"--run-info {source}: a JSON object is needed, not {type(info).__name__}"
        )
    dest = Path(run_dir)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / ".run.json.part"
    tmp.write_text(json.dumps(info, indent=4, sort_keys=True) + "\n", encoding="utf-8")
    tmp.chmod(0o644)
    os.replace(tmp, dest / "run.json")


def run_summary(args: argparse.Namespace) -> int:
    from gpufleet.report import table, update_latest, write_report

    if args.run_info:
        _write_run_info(args.run_dir, args.run_info)
    s = write_report(args.run_dir, plot=not args.no_plot)
    if args.latest:
        update_latest(s.run_dir.resolve())
    if not args.quiet:
        print(table(s))
        print(f"\nreport: {s.run_dir}/index.html (summary.md, summary.json, junit.xml)")
    return s.exit_code


def run_root_cause(args: argparse.Namespace) -> int:
    from pathlib import Path

    from gpufleet.errors import GpufleetError
    from gpufleet.report.logs import launch_root_cause

    log = Path(args.log)
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise GpufleetError(f"cannot read {args.log}: {exc.strerror or exc}") from None
    print(json.dumps(launch_root_cause(log, text)))
    return 0
