"""``gpufleet health``: the fast node checks (gpufleet.node.fast_checks) within a time limit, fit
for a scheduler's health-check program; with ``--slurm`` it also acts on the verdict::

    gpufleet health --slurm --timeout 60 --output /var/lib/gpufleet/health.json

* the checks run in a child process; one that does not finish within ``--timeout`` seconds
  (an NVML call stuck on a broken GPU) is killed and counts as the failure
  ``health_timeout``;
* ``--slurm``: a failed check drains this node (``scontrol update nodename=<node>
  state=drain reason="gpufleet: <check>: <value>"``); when every check passes again, a node
  that gpufleet drained is resumed; a node drained for any other reason is left alone;
* one line per failed or warning check on stdout, the records as a result file of kind
  ``health`` with ``--output``.

Exit 0 when no check fails, 1 when one does (or Slurm could not be told), 2 for bad
arguments. slurm.conf: ``HealthCheckProgram=/usr/local/sbin/gpufleet-healthcheck`` (the
wrapper role slurm_health installs; docs/slurm.md)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import GpufleetError
from gpufleet.node import fast_checks as nodehealth
from gpufleet.node import xid
from gpufleet.node.nvml import load_recording
from gpufleet.results import Record, ResultFile
from gpufleet.verify.launchers import slurm

HEALTH_TIMEOUT = "health_timeout"


def register(sub: Any) -> None:
    p = add_command(
        sub, "health", "fast node checks for a scheduler (drain/resume in Slurm)", __doc__
    )
    p.add_argument("--manifest", type=argtypes.text, default=str(nodehealth.DEFAULT_MANIFEST))
    p.add_argument("--nvml-recording", type=argtypes.text, default=None, help="replay a recording")
    p.add_argument("--require-gpu", dest="require_gpu", action="store_true", default=None)
    p.add_argument("--no-require-gpu", dest="require_gpu", action="store_false")
    p.add_argument("--expected-gpus", type=argtypes.int_range(0, 64), default=None)
    p.add_argument(
        "--xid-window-hours", type=argtypes.hours, default=xid.DEFAULT_WINDOW_HOURS, metavar="H"
    )
    p.add_argument("--timeout", type=argtypes.timeout_s, default=60.0, help="seconds (default 60)")
    p.add_argument("--output", type=argtypes.text, default=None, help="result file (kind health)")
    p.add_argument("--node", type=argtypes.text, default=None, help="node name in the records")
    p.add_argument("--slurm", action="store_true", help="drain / resume this node in Slurm")
    p.add_argument(
        "--slurm-node",
        type=argtypes.text,
        default=None,
        help="this node's Slurm name (default: the short host name)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the scontrol command only")
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _check_args(args: argparse.Namespace) -> list[str]:
    out = ["--manifest", args.manifest, "--xid-window-hours", str(args.xid_window_hours)]
    if args.nvml_recording:
        out += ["--nvml-recording", args.nvml_recording]
    if args.require_gpu is not None:
        out.append("--require-gpu" if args.require_gpu else "--no-require-gpu")
    if args.expected_gpus is not None:
        out += ["--expected-gpus", str(args.expected_gpus)]
    return out


def _records_in_process(args: argparse.Namespace) -> list[Record]:
    recording = load_recording(args.nvml_recording) if args.nvml_recording else None
    return nodehealth.run_checks(
        manifest_path=Path(args.manifest),
        recording=recording,
        require_gpu=args.require_gpu,
        expected_gpus=args.expected_gpus,
        xid_window_h=float(args.xid_window_hours),
    )


def _records_bounded(args: argparse.Namespace) -> list[Record]:
    """The checks in a child process, killed past --timeout (a hung NVML call)."""
    argv = [sys.executable, "-m", "gpufleet", "health", "--in-process", *_check_args(args)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        return [
            Record(
                name=HEALTH_TIMEOUT,
                status="fail",
                value=f"{args.timeout:g}s",
                threshold=f"< {args.timeout:g}s",
                message=f"the node checks did not finish within {args.timeout:g}s (an NVML or "
                "kernel-log read hangs: a GPU fell off the bus, or the driver is wedged). Fix: "
                "nvidia-smi and journalctl -k on the node; reboot it if nvidia-smi hangs",
                remedy="nvidia-smi / journalctl -k; reboot the node if nvidia-smi hangs",
            )
        ]
    try:
        data = json.loads(r.stdout)
        known = set(Record.__dataclass_fields__)
        return [Record(**{k: v for k, v in d.items() if k in known}) for d in data]
    except (ValueError, TypeError) as exc:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return [
            Record(
                name="health_run",
                status="fail",
                value=r.returncode,
                message=f"the node checks crashed (rc {r.returncode}: {tail[0]}; {exc})",
                remedy="run `gpufleet health -v` on the node and read the traceback",
            )
        ]


def _value_text(r: Record) -> str:
    value = r.value if r.value not in (None, "") else r.status
    text = str(value)
    return f"GPU {r.gpu}: {text}" if r.gpu else text


def run(args: argparse.Namespace) -> int:
    if args.in_process:
        print(json.dumps([r.to_dict() for r in _records_in_process(args)]))
        return 0
    node = args.node or socket.gethostname().split(".")[0]
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.monotonic()
    records = [dataclasses.replace(r, node=node) for r in _records_bounded(args)]
    failed = [r for r in records if r.status == "fail"]
    for r in records:
        if r.status in ("fail", "warn"):
            print(f"{r.status.upper():4} {r.name}: {r.message}")
    verdict = (
        f"{node}: {len(failed)} check(s) failed"
        if failed
        else f"{node}: healthy ({len(records)} checks)"
    )
    print(verdict)
    meta: dict[str, Any] = {"timeout_s": args.timeout}
    rc = 1 if failed else 0
    if args.slurm:
        slurm_name = args.slurm_node or socket.gethostname().split(".")[0]
        try:
            shown = slurm.run_cmd(["scontrol", "show", "node", "-o", slurm_name])
            if shown.returncode != 0:
                raise GpufleetError(
                    f"scontrol show node {slurm_name}: {(shown.stderr or shown.stdout).strip()}"
                )
            action = slurm.health_action(
                slurm_name,
                slurm.parse_show_line(shown.stdout),
                [(r.name, _value_text(r)) for r in failed],
            )
            meta["slurm"] = {"node": slurm_name, "action": action.action, "reason": action.reason}
            if action.argv and args.dry_run:
                print("would run: " + " ".join(action.argv))
            elif action.argv:
                done = slurm.run_cmd(list(action.argv))
                if done.returncode != 0:
                    raise GpufleetError(
                        f"{' '.join(action.argv[:4])} failed: "
                        f"{(done.stderr or done.stdout).strip()}"
                    )
            print(f"slurm: {action.action}: {action.reason}")
        except GpufleetError as exc:
            print(f"ERROR: slurm: {exc}", file=sys.stderr)
            meta["slurm"] = {"node": slurm_name, "error": str(exc)}
            rc = 1
    if args.output:
        ResultFile(
            kind="health",
            node=node,
            mode="node",
            started=started,
            duration_s=time.monotonic() - t0,
            records=records,
            meta=meta,
        ).write(args.output)
    return rc


def build_args(argv: list[str]) -> argparse.Namespace:
    """``gpufleet health`` options parsed alone (tests, callers in Python)."""
    parser = argparse.ArgumentParser(prog="gpufleet")
    register(parser.add_subparsers())
    return parser.parse_args(["health", *argv])
