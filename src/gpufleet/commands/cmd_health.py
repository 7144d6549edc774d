"""``gpufleet health``: the fast node checks (gpufleet.node.fast_checks) within a time limit, fit
for a scheduler's health-check program or a systemd timer; with ``--slurm`` it also acts on
the verdict::

    gpufleet health --slurm --timeout 30 --output /var/lib/gpufleet/health.json \
        --textfile /var/lib/node_exporter/gpufleet.prom

* every check ends pass, warn, fail, skip (cannot run here by design) or incomplete (could
  not finish: timed out, a tool missing, NVML not answering in time); warn, fail and
  incomplete records carry a remedy;
* the checks run in a child process; one that does not finish within ``--timeout`` seconds
  (an NVML call stuck on a broken GPU) is killed and counts as the incomplete check
  ``health_timeout``: it is not a failure, and it never drains a node;
* ``--state FILE`` (default /var/lib/gpufleet/health-state.json with ``--slurm`` or
  ``--textfile``): the passes counted across runs (gpufleet.node.pass_state): failed passes
  in a row, the last pass that judged the node and until when;
* ``--slurm``: a failure that is due drains this node (``scontrol update nodename=<node>
  state=drain reason="gpufleet: <check>: <value>"``): ``--drain-after`` N failed passes in a
  row (default 2), or at once for a critical Xid or a lost GPU (gpufleet.node.drain_policy);
  when every check passes again, a node that gpufleet drained is resumed; a node drained for
  any other reason is left alone. An incomplete run (and no failure) leaves the node as it
  is: neither drained nor resumed, and not counted;
* one line per failed, incomplete or warning check on stdout (stderr with ``--prom``), the
  records as a result file of kind ``health`` with ``--output`` (``valid_until`` = now +
  ``--valid-hours``, 24 by default), the pass as Prometheus metrics in node_exporter's
  textfile with ``--textfile`` (written atomically) and on stdout with ``--prom``
  (gpufleet.node.textfile; docs/monitoring.md);
* ``--read-output FILE`` judges an earlier ``--output`` file instead of running the checks;
  past its ``valid_until`` every record reads as incomplete (stale).

Exit status: 0 every check passes or warns (or skips), 1 a check fails (or Slurm could not
be told, or the state could not be kept), 2 refused arguments, 3 no check fails but one is
incomplete. slurm.conf: ``HealthCheckProgram=/usr/local/sbin/gpufleet-healthcheck`` (the
wrapper role slurm_health installs; docs/slurm.md); the timer: role health_timer
(docs/monitoring.md)."""

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
from typing import Any, TextIO

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import EXIT_FAILED, GpufleetError, RefusedError
from gpufleet.node import drain_policy, pass_state, textfile, xid
from gpufleet.node import fast_checks as nodehealth
from gpufleet.node.fast_checks import HealthPass, PassFacts
from gpufleet.node.nvml import load_recording
from gpufleet.node.pass_state import PassState
from gpufleet.provisioning import slurm_nodes
from gpufleet.results import (
    Record,
    ResultFile,
    exit_code,
    load_result_file,
    parse_stamp,
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
    add(
        "--profiles-dir",
        type=argtypes.text,
        metavar="DIR",
        help="a site's own profile files, read after the shipped ones (gpufleet_profiles_dir; "
        "docs/profiles.md, 'Site profiles')",
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
        help="also write the pass as Prometheus metrics for node_exporter's textfile "
        "collector (a *.prom file, written atomically; docs/monitoring.md)",
    )
    p.add_argument(
        "--prom",
        action="store_true",
        help="print the pass as Prometheus metrics on stdout (the verdict lines go to stderr)",
    )
    p.add_argument(
        "--state",
        type=argtypes.text,
        default=None,
        metavar="FILE",
        help="the passes counted across runs (failed passes in a row, last success); default "
        f"{pass_state.DEFAULT_STATE} with --slurm or --textfile, else none",
    )
    p.add_argument(
        "--drain-after",
        type=argtypes.int_range(1, 100),
        default=drain_policy.DEFAULT_DRAIN_AFTER,
        metavar="N",
        help="with --slurm: drain after N failed passes in a row (a critical Xid or a lost "
        "GPU: at once; default %(default)s)",
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


def _pass_in_process(args: argparse.Namespace) -> HealthPass:
    recording = load_recording(args.nvml_recording) if args.nvml_recording else None
    return nodehealth.run_pass(
        manifest_path=Path(args.manifest),
        recording=recording,
        require_gpu=args.require_gpu,
        expected_gpus=args.expected_gpus,
        xid_window_h=float(args.xid_window_hours),
    )


def _pass_bounded(args: argparse.Namespace) -> HealthPass:
    """The checks in a child process, killed past --timeout (a hung NVML call); a pass that
    did not finish has one incomplete record and no facts."""
    argv = [sys.executable, "-m", "gpufleet", "health", "--in-process", *_check_args(args)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout, check=False)
    except subprocess.TimeoutExpired:
        return HealthPass(
            [
                Record(
                    name=HEALTH_TIMEOUT,
                    status="incomplete",
                    value=f"{args.timeout:g}s",
                    threshold=f"< {args.timeout:g}s",
                    message=f"the node checks did not finish within {args.timeout:g}s (an NVML "
                    "or kernel-log read hangs: a GPU fell off the bus, the driver is wedged, or "
                    "the node is overloaded); the node is not judged. Fix: nvidia-smi and "
                    "journalctl -k on the node; reboot it if nvidia-smi hangs; else raise "
                    "--timeout",
                    remedy="nvidia-smi / journalctl -k; reboot the node if nvidia-smi hangs, "
                    "else raise --timeout (slurm_health_timeout, health_timer_timeout)",
                )
            ],
            None,
        )
    try:
        data = json.loads(r.stdout)
        known = set(Record.__dataclass_fields__)
        records = [Record(**{k: v for k, v in d.items() if k in known}) for d in data["records"]]
        facts = data["facts"]
        return HealthPass(records, PassFacts.from_dict(facts) if isinstance(facts, dict) else None)
    except (ValueError, TypeError, KeyError) as exc:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return HealthPass(
            [
                Record(
                    name=HEALTH_RUN,
                    status="incomplete",
                    value=r.returncode,
                    threshold="rc 0 and a JSON object of records and facts",
                    message=f"the node checks crashed (rc {r.returncode}: {tail[0]}; {exc}); "
                    "the node is not judged. Fix: run `gpufleet -v health --in-process` on "
                    "the node and read the traceback",
                    remedy="run `gpufleet -v health --in-process` on the node and read the "
                    "traceback",
                )
            ],
            None,
        )


def _value_text(r: Record) -> str:
    value = r.value if r.value not in (None, "") else r.status
    text = str(value)
    return f"GPU {r.gpu}: {text}" if r.gpu else text


def _print_verdict(node: str, records: list[Record], out: TextIO) -> None:
    for status in ("fail", "incomplete", "warn"):
        for r in records:
            if r.status == status:
                print(f"{r.status.upper():4} {r.name}: {r.message}", file=out)
    failed = sum(r.status == "fail" for r in records)
    incomplete = sum(r.status == "incomplete" for r in records)
    if failed:
        print(f"{node}: {failed} check(s) failed", file=out)
    elif incomplete:
        print(f"{node}: not judged, {incomplete} check(s) incomplete (no failure)", file=out)
    else:
        print(f"{node}: healthy ({len(records)} checks)", file=out)


def _tell_slurm(
    args: argparse.Namespace,
    records: list[Record],
    meta: dict[str, Any],
    state: PassState,
    out: TextIO,
) -> tuple[bool, bool | None]:
    """Drain on a failure that is due (gpufleet.node.drain_policy); resume our drain when all
    is well; leave the node alone when the run is incomplete. (Slurm was told, gpufleet's
    drain holds the node now: None when Slurm was not asked)."""
    slurm_name = args.slurm_node or socket.gethostname().split(".")[0]
    failed = [r for r in records if r.status == "fail"]
    incomplete = [r.name for r in records if r.status == "incomplete"]
    if not failed and incomplete:
        reason = f"incomplete ({', '.join(incomplete)}): {slurm_name} left as it is"
        meta["slurm"] = {"node": slurm_name, "action": "none", "reason": reason}
        print(f"slurm: none: {reason}", file=out)
        return True, state.drained
    decision = drain_policy.decide(records, state.failed_passes, args.drain_after)
    try:
        shown = slurm.run_cmd(["scontrol", "show", "node", "-o", slurm_name])
        if shown.returncode != 0:
            raise GpufleetError(
                f"scontrol show node {slurm_name}: {(shown.stderr or shown.stdout).strip()}"
            )
        fields = slurm_nodes.parse_show_line(shown.stdout)
        action = slurm.health_action(
            slurm_name,
            fields,
            [(r.name, _value_text(r)) for r in failed],
            due=decision.due,
            not_yet=decision.why,
        )
        meta["slurm"] = {
            "node": slurm_name,
            "action": action.action,
            "reason": action.reason,
            "failed_passes": state.failed_passes,
            "drain_after": args.drain_after,
            "due": decision.due,
        }
        if action.argv and args.dry_run:
            print("would run: " + " ".join(action.argv), file=out)
        elif action.argv:
            done = slurm.run_cmd(list(action.argv))
            if done.returncode != 0:
                raise GpufleetError(
                    f"{' '.join(action.argv[:4])} failed: {(done.stderr or done.stdout).strip()}"
                )
        why = f" ({decision.why})" if action.action == "drain" else ""
        print(f"slurm: {action.action}: {action.reason}{why}", file=out)
    except GpufleetError as exc:
        print(f"ERROR: slurm: {exc}", file=sys.stderr)
        meta["slurm"] = {"node": slurm_name, "error": str(exc)}
        return False, None
    if action.action == "drain":
        return True, True
    if action.action == "resume":
        return True, False
    return True, slurm.drained_by_gpufleet(fields)


def _state_path(args: argparse.Namespace) -> Path | None:
    if args.state:
        return Path(args.state)
    return pass_state.DEFAULT_STATE if args.slurm or args.textfile else None


def _export(args: argparse.Namespace, ex: textfile.Exposition) -> bool:
    """--textfile and --prom; False when the textfile could not be written."""
    text = textfile.render(ex)
    if args.prom:
        sys.stdout.write(text)
    if args.textfile:
        try:
            textfile.write(args.textfile, text)
        except OSError as exc:
            print(
                f"ERROR: --textfile {args.textfile}: {exc}; node_exporter keeps the last file. "
                "Fix: a directory root can write (gpufleet_health_textfile_dir), with free space",
                file=sys.stderr,
            )
            return False
    return True


def _count_and_act(
    args: argparse.Namespace,
    records: list[Record],
    meta: dict[str, Any],
    now: float,
    export: Callable[[PassState], bool],
    out: TextIO,
) -> bool:
    """Count this pass in the state file, tell Slurm, export the metrics, all under the
    state's lock (gpufleet.node.pass_state). False when something could not be done."""
    valid_s = args.valid_hours * 3600
    path = _state_path(args)
    if path is None:  # nothing kept: the pass alone (gpufleet health --prom)
        return export(pass_state.advance(PassState(), records, now, valid_s))
    ok = True
    try:
        with pass_state.locked(path):
            before, note = pass_state.load(path)
            if note:
                print(f"WARN state: {note}", file=sys.stderr)
                meta["state_note"] = note
            state = pass_state.advance(before, records, now, valid_s)
            if args.slurm:
                told, drained = _tell_slurm(args, records, meta, state, out)
                ok = told
                state = dataclasses.replace(state, drained=drained)
            try:
                pass_state.save(path, state)
            except OSError as exc:
                print(
                    f"ERROR: --state {path}: {exc}; this pass is not counted. Fix: free space "
                    "and write access for root in that directory (gpufleet_state_dir)",
                    file=sys.stderr,
                )
                ok = False
            meta["state"] = state.to_dict()
            return export(state) and ok
    except pass_state.PassStateError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        meta["state_error"] = str(exc)
        export(pass_state.advance(PassState(), records, now, valid_s))
        return False


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
    _print_verdict(result.node, result.records, sys.stderr if args.prom else sys.stdout)
    if args.textfile or args.prom:
        started = parse_stamp(earlier.started).timestamp()
        try:
            state = PassState.from_dict(earlier.meta.get("state"))
        except ValueError:  # a file from before --state: what the file itself says
            judged = pass_state.outcome(earlier.records) != "incomplete"
            until = parse_stamp(earlier.valid_until).timestamp() if earlier.valid_until else None
            state = PassState(
                last_run=started,
                last_success=started if judged else None,
                valid_until=until if judged else None,
            )
        facts = earlier.meta.get("facts")
        ex = textfile.Exposition(
            records=result.records,
            ran_at=started,
            state=state,
            facts=PassFacts.from_dict(facts) if isinstance(facts, dict) else None,
            duration_s=earlier.duration_s,
        )
        if not _export(args, ex):
            return EXIT_FAILED
    return exit_code(result.records)


def run(args: argparse.Namespace) -> int:
    if args.in_process:
        child = _pass_in_process(args)
        found = None if child.facts is None else child.facts.to_dict()
        print(json.dumps({"records": [r.to_dict() for r in child.records], "facts": found}))
        return 0
    if args.read_output:
        if args.slurm or args.output:
            raise RefusedError(
                "--read-output judges an earlier file: it neither tells Slurm nor writes "
                "--output; drop --slurm/--output, or drop --read-output to run the checks"
            )
        return _read_output(args)
    node = args.node or socket.gethostname().split(".")[0]
    out = sys.stderr if args.prom else sys.stdout
    now = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    done = _pass_bounded(args)
    records = [dataclasses.replace(r, node=node) for r in done.records]
    duration = time.monotonic() - t0
    _print_verdict(node, records, out)
    facts = None if done.facts is None else done.facts.to_dict()
    meta: dict[str, Any] = {"timeout_s": args.timeout, "facts": facts}
    rc = exit_code(records)

    def export(state: PassState) -> bool:
        if not (args.textfile or args.prom):
            return True
        ex = textfile.Exposition(records, now.timestamp(), state, done.facts, duration)
        return _export(args, ex)

    if not _count_and_act(args, records, meta, now.timestamp(), export, out):
        rc = EXIT_FAILED
    if args.output:
        ResultFile(
            kind="health",
            node=node,
            mode="node",
            started=utc_stamp(now),
            duration_s=duration,
            records=records,
            meta=meta,
            valid_until=valid_until(now, args.valid_hours),
        ).write(args.output)
    return rc


def build_args(argv: list[str]) -> argparse.Namespace:
    """``gpufleet health`` options parsed alone (tests, callers in Python)."""
    parser = argparse.ArgumentParser(prog="gpufleet")
    register(parser.add_subparsers())
    return parser.parse_args(["health", *argv])
