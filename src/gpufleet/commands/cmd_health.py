"""``gpufleet health``: the fast node checks (gpufleet.node.fast_checks) within a time limit, fit
for a scheduler's health-check program; with ``--slurm`` it also acts on the verdict::

    gpufleet health --slurm --timeout 60 --output /var/lib/gpufleet/health.json \
        --textfile /var/lib/node_exporter/textfile/gpufleet.prom

* every check ends pass, warn, fail, skip (cannot run here by design) or incomplete (could
  not finish: timed out, a tool missing, NVML not answering in time); warn, fail and
  incomplete records carry a remedy;
* the checks run in a child process; one that does not finish within ``--timeout`` seconds
  (an NVML call stuck on a broken GPU) is killed and counts as the incomplete check
  ``health_timeout``: it is not a failure, and it never drains a node;
* ``--slurm``: a failed check drains this node (``scontrol update nodename=<node>
  state=drain reason="gpufleet: <check>: <value>"``); when every check passes again, a node
  that gpufleet drained is resumed; a node drained for any other reason is left alone. An
  incomplete run (and no failure) leaves the node as it is: neither drained nor resumed;
* one line per failed, incomplete or warning check on stdout, the records as a result file
  of kind ``health`` with ``--output`` (``valid_until`` = now + ``--valid-hours``, 24 by
  default), the states in node_exporter's textfile format with ``--textfile``;
* ``--read-output FILE`` judges an earlier ``--output`` file instead of running the checks;
  past its ``valid_until`` every record reads as incomplete (stale).

Exit status: 0 every check passes or warns (or skips), 1 a check fails (or Slurm could not
be told), 2 refused arguments, 3 no check fails but one is incomplete. slurm.conf:
``HealthCheckProgram=/usr/local/sbin/gpufleet-healthcheck`` (the wrapper role slurm_health
installs; docs/slurm.md)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import EXIT_FAILED, GpufleetError, RefusedError
from gpufleet.node import fast_checks as nodehealth
from gpufleet.node import textfile, xid
from gpufleet.node.nvml import load_recording
from gpufleet.results import (
    Record,
    ResultFile,
    exit_code,
    load_result_file,
    read_as_of,
    utc_stamp,
    valid_until,
)
from gpufleet.verify.launchers import slurm

HEALTH_TIMEOUT = "health_timeout"
HEALTH_RUN = "health_run"
#: How long a health verdict holds (GCP's cluster-health-scanner stamps results likewise).
DEFAULT_VALID_HOURS = 24.0


# The node checks' command-line options, declared once for gpufleet health (argparse) and the
# checks suite (pytest_addoption in checks/conftest.py). Both take an ``add`` callable with
# argparse's add_argument signature: parser.add_argument itself, or a pytest option group's
# addoption (pytest hands the keywords on to argparse).
AddOption = Callable[..., Any]


def add_node_options(add: AddOption) -> None:
    """Options of every node check front end: the NVML source, GPU expectations, Xid window,
    node name. Destinations: nvml_recording, require_gpu, expected_gpus, xid_window_hours,
    node."""
    add("--nvml-recording", type=argtypes.text, metavar="PATH",
        help="replay a recording instead of the real NVML")  # fmt: skip
    add(
        "--require-gpu",
        dest="require_gpu",
        action="store_true",
        default=None,
        help="fail (not skip) GPU checks without a driver; default: manifest require_gpu, "
        "else env GPUFLEET_REQUIRE_GPU, else false",
    )
    add("--no-require-gpu", dest="require_gpu", action="store_false",
        help="skip GPU checks without a driver")  # fmt: skip
    add("--expected-gpus", type=argtypes.int_range(0, 64), metavar="N",
        help="GPUs this node must have (default: manifest gpus_expected, else all)")  # fmt: skip
    add(
        "--xid-window-hours",
        type=argtypes.hours,
        default=xid.DEFAULT_WINDOW_HOURS,
        metavar="H",
        help="look for Xids in the last H hours (default %(default)s)",
    )
    add("--node", type=argtypes.text, metavar="NAME",
        help="node name in the records (default: manifest node, else hostname)")  # fmt: skip


def add_suite_options(add: AddOption) -> None:
    """Options only the checks suite reads (docs/checks.md); the registry's judges read them
    from gpufleet.node.health.context.NodeContext.opt, where gpufleet health has them as None."""
    add("--kernel-log", metavar="PATH", help="read Xid lines from a file")
    add("--min-driver", type=argtypes.driver_version, metavar="VER",
        help="driver floor (default: plan min_driver)")  # fmt: skip
    for flag, shape, what in (
        ("--expect-cuda", "X.Y", "torch.version.cuda (default: plan cuda)"),
        ("--expect-nccl", "X.Y.Z", "torch NCCL (default: plan nccl)"),
        ("--expect-toolkit", "X.Y", "nvcc release (default: plan toolkit)"),
    ):
        add(flag, type=argtypes.dotted_version(shape), metavar=shape, help=what)
    add(
        "--wheel-variant",
        type=argtypes.wheel_variant,
        metavar="V",
        help="installed wheel variant, cuXXX or cpu (default: manifest env_wheel_variant)",
    )
    add("--ib-ports", metavar="HCA:PORT,...", help="ports ib_ports expects (default: IB)")
    add("--ib-min-rate", type=float, metavar="GBPS", help="least IB port rate (Gb/s)")
    add("--ib-link-layer", metavar="L", help="InfiniBand or Ethernet (RoCE)")
    add(
        "--system-profile",
        type=argtypes.text,
        metavar="NAME",
        help="system profile the node is judged against (the host's gpufleet_system_profile; "
        "gpufleet profile show lists them), default auto: detected from the GPUs",
    )
    add("--no-pcie-load", action="store_true",
        help="do not load an idle GPU with torch to re-check a downshifted PCIe link")  # fmt: skip


def register(sub: Any) -> None:
    p = add_command(
        sub, "health", "fast node checks for a scheduler (drain/resume in Slurm)", __doc__
    )
    p.add_argument("--manifest", type=argtypes.text, default=str(nodehealth.DEFAULT_MANIFEST))
    add_node_options(p.add_argument)
    p.add_argument("--timeout", type=argtypes.timeout_s, default=60.0, help="seconds (default 60)")
    p.add_argument("--output", type=argtypes.text, default=None, help="result file (kind health)")
    p.add_argument("--slurm", action="store_true", help="drain / resume this node in Slurm")
    p.add_argument(
        "--slurm-node",
        type=argtypes.text,
        default=None,
        help="this node's Slurm name (default: the short host name)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the scontrol command only")
    p.add_argument(
        "--textfile",
        type=argtypes.text,
        default=None,
        metavar="PATH",
        help="also write the check states for node_exporter's textfile collector (*.prom)",
    )
    p.add_argument(
        "--valid-hours",
        type=argtypes.hours,
        default=DEFAULT_VALID_HOURS,
        metavar="H",
        help="how long the verdict in --output holds (valid_until; default %(default)g)",
    )
    p.add_argument(
        "--read-output",
        type=argtypes.text,
        default=None,
        metavar="FILE",
        help="judge an earlier --output file instead of running the checks (stale past its "
        "valid_until: incomplete)",
    )
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
                status="incomplete",
                value=f"{args.timeout:g}s",
                threshold=f"< {args.timeout:g}s",
                message=f"the node checks did not finish within {args.timeout:g}s (an NVML or "
                "kernel-log read hangs: a GPU fell off the bus, the driver is wedged, or the "
                "node is overloaded); the node is not judged. Fix: nvidia-smi and journalctl "
                "-k on the node; reboot it if nvidia-smi hangs; else raise --timeout",
                remedy="nvidia-smi / journalctl -k; reboot the node if nvidia-smi hangs, else "
                "raise --timeout (slurm_health_timeout)",
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
                name=HEALTH_RUN,
                status="incomplete",
                value=r.returncode,
                threshold="rc 0 and a JSON list of records",
                message=f"the node checks crashed (rc {r.returncode}: {tail[0]}; {exc}); the "
                "node is not judged. Fix: run `gpufleet -v health --in-process` on the node "
                "and read the traceback",
                remedy="run `gpufleet -v health --in-process` on the node and read the traceback",
            )
        ]


def _value_text(r: Record) -> str:
    value = r.value if r.value not in (None, "") else r.status
    text = str(value)
    return f"GPU {r.gpu}: {text}" if r.gpu else text


def _print_verdict(node: str, records: list[Record]) -> None:
    for status in ("fail", "incomplete", "warn"):
        for r in records:
            if r.status == status:
                print(f"{r.status.upper():4} {r.name}: {r.message}")
    failed = sum(r.status == "fail" for r in records)
    incomplete = sum(r.status == "incomplete" for r in records)
    if failed:
        print(f"{node}: {failed} check(s) failed")
    elif incomplete:
        print(f"{node}: not judged, {incomplete} check(s) incomplete (no failure)")
    else:
        print(f"{node}: healthy ({len(records)} checks)")


def _tell_slurm(args: argparse.Namespace, records: list[Record], meta: dict[str, Any]) -> bool:
    """Drain on a failure; resume our drain when all is well; leave the node alone when the
    run is incomplete. False when Slurm could not be told."""
    slurm_name = args.slurm_node or socket.gethostname().split(".")[0]
    failed = [r for r in records if r.status == "fail"]
    incomplete = [r.name for r in records if r.status == "incomplete"]
    if not failed and incomplete:
        reason = f"incomplete ({', '.join(incomplete)}): {slurm_name} left as it is"
        meta["slurm"] = {"node": slurm_name, "action": "none", "reason": reason}
        print(f"slurm: none: {reason}")
        return True
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
                    f"{' '.join(action.argv[:4])} failed: {(done.stderr or done.stdout).strip()}"
                )
        print(f"slurm: {action.action}: {action.reason}")
    except GpufleetError as exc:
        print(f"ERROR: slurm: {exc}", file=sys.stderr)
        meta["slurm"] = {"node": slurm_name, "error": str(exc)}
        return False
    return True


def _read_output(args: argparse.Namespace) -> int:
    """The verdict of an earlier --output file, as it reads now (stale: incomplete)."""
    try:
        earlier = load_result_file(args.read_output)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RefusedError(
            f"--read-output {args.read_output}: not a gpufleet result file ({exc}); pass the "
            "file an earlier `gpufleet health --output` wrote"
        ) from exc
    now = datetime.datetime.now(datetime.timezone.utc)
    result = read_as_of(earlier, now)
    _print_verdict(result.node, result.records)
    if args.textfile:
        started = datetime.datetime.fromisoformat(earlier.started.replace("Z", "+00:00"))
        textfile.write(args.textfile, result.records, started.timestamp())
    return exit_code(result.records)


def run(args: argparse.Namespace) -> int:
    if args.in_process:
        print(json.dumps([r.to_dict() for r in _records_in_process(args)]))
        return 0
    if args.read_output:
        if args.slurm or args.output:
            raise RefusedError(
                "--read-output judges an earlier file: it neither tells Slurm nor writes "
                "--output; drop --slurm/--output, or drop --read-output to run the checks"
            )
        return _read_output(args)
    node = args.node or socket.gethostname().split(".")[0]
    now = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    records = [dataclasses.replace(r, node=node) for r in _records_bounded(args)]
    _print_verdict(node, records)
    meta: dict[str, Any] = {"timeout_s": args.timeout}
    rc = exit_code(records)
    if args.slurm and not _tell_slurm(args, records, meta):
        rc = EXIT_FAILED
    if args.output:
        ResultFile(
            kind="health",
            node=node,
            mode="node",
            started=utc_stamp(now),
            duration_s=time.monotonic() - t0,
            records=records,
            meta=meta,
            valid_until=valid_until(now, args.valid_hours),
        ).write(args.output)
    if args.textfile:
        textfile.write(args.textfile, records, now.timestamp())
    return rc


def build_args(argv: list[str]) -> argparse.Namespace:
    """``gpufleet health`` options parsed alone (tests, callers in Python)."""
    parser = argparse.ArgumentParser(prog="gpufleet")
    register(parser.add_subparsers())
    return parser.parse_args(["health", *argv])
