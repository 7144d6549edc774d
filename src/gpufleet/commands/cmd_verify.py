"""``gpufleet verify``: one make-verify run with its exit code (gpufleet.verify.verify_run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.verify import verify_run as verifyrun
from gpufleet.verify.launchers import registry as launchers
from gpufleet.verify.launchers.base import describe


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "verify",
        "verify the nodes of an inventory (make verify); exit 0 pass, 1 failure, 2 refused",
        verifyrun.__doc__,
    )
    p.add_argument("--inventory", "-i", default="inventory", help="inventory (default inventory)")
    p.add_argument("--run-id", default="", help="run id (default: a new one, gpufleet runid)")
    p.add_argument(
        "--lock-wait",
        type=argtypes.float_range(0, 86400),
        default=900.0,
        help="seconds to wait for another make verify of this checkout (default 900)",
    )
    p.add_argument("--repo", default="", help="the gpufleet checkout (default: found from here)")
    p.add_argument(
        "--report-dir",
        type=argtypes.text,
        default=None,
        help="where the reports go (<dir>/<run id>/, <dir>/latest), with this checkout's "
        "verify lock and run ids: default <repo>/reports (make verify REPORT_DIR=); the "
        "inventory's verify_report_dir, if set, must name the same folder",
    )
    p.add_argument(
        "--launcher",
        choices=("", *launchers.names()),
        default="",
        help="how the cluster steps start: "
        + "; ".join(describe(launchers.LAUNCHERS.values()))
        + " (default: the inventory's gpufleet_launcher; make verify LAUNCHER=)",
    )
    p.add_argument(
        "--tier",
        type=argtypes.tier,
        default=None,
        help="quick (a Slurm prolog: node checks, compute and SDC, at most 60 s per node), "
        "standard (everything), burnin (standard, then every device busy for --duration); "
        "default: the inventory's verify_tier, else standard (make verify TIER=)",
    )
    p.add_argument(
        "--duration",
        type=argtypes.duration,
        default=None,
        help="how long the burnin tier holds every device busy: 90s, 2m, 30m, 1h (default: "
        "verify_burnin_duration, 30m; make verify DURATION=)",
    )
    p.add_argument(
        "--profiles-dir",
        type=argtypes.text,
        default=None,
        help="a directory of the site's own profile files, read after the shipped ones "
        "(gpufleet_profiles_dir; docs/profiles.md, 'Site profiles'); checked before any change",
    )
    p.add_argument(
        "ansible_args", nargs="*", metavar="-- ANSIBLE_ARG", help="more ansible-playbook arguments"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    repo = Path(args.repo).resolve() if args.repo else verifyrun.find_repo(Path.cwd())
    extra = list(args.ansible_args)
    if args.launcher:
        extra += ["-e", json.dumps({"gpufleet_launcher": args.launcher})]
    extra += ["-e", json.dumps(extra_vars(args))] if extra_vars(args) else []
    report_dir = Path(args.report_dir) if args.report_dir else None
    out = verifyrun.run(
        repo, args.inventory, args.run_id, extra, args.lock_wait, report_dir=report_dir
    )
    return out.exit_code


def extra_vars(args: argparse.Namespace) -> dict[str, Any]:
    """The -e variables of --tier, --duration and --profiles-dir (only those given); the
    profiles directory as an absolute path (the playbook runs in the checkout)."""
    out: dict[str, Any] = {}
    if args.tier:
        out["verify_tier"] = args.tier
    if args.duration:
        out["verify_burnin_duration"] = f"{args.duration}s"
    if args.profiles_dir:
        out["gpufleet_profiles_dir"] = str(Path(args.profiles_dir).resolve())
    return out
