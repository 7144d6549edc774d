"""``gpufleet slurm submit``: run one cluster step of verify (or make run) as a Slurm job and
follow it to its end (gpufleet.verify.launchers.slurm, docs/slurm.md)::

    gpufleet slurm submit --job-name gpufleet-allreduce --nodelist node1,node2,node3 \\
        --timeout 360 --start-timeout 120 --output /var/lib/gpufleet/runs/ID/slurm-%j.out \\
        --record /var/lib/gpufleet/runs/ID/node1/slurm-allreduce.json \\
        -- /bin/bash /var/lib/gpufleet/runs/ID/allreduce.slurm.sh

submits ``srun --ntasks-per-node=1 -- <task>`` with sbatch, prints every state change,
cancels the job when it is still pending after ``--start-timeout`` seconds, when it runs
past ``--timeout`` seconds, or when this command is interrupted (SIGTERM, SIGINT, SIGHUP),
and writes the outcome (job id, state, Slurm's reason, exit code) as a result file of kind
``slurm-<step>``. Exit 0 when the job completed with exit code 0, else 1.

``gpufleet slurm nodes node1,node2,node3`` prints, as JSON, what slurmctld says of these
nodes (state, drain reason, unknown names) and their order in an allocation (the first
host hosts the rendezvous); verify runs it once before the cluster steps."""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import socket
import time
from types import FrameType
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import GpufleetError
from gpufleet.results import Record, ResultFile
from gpufleet.verify.launchers import slurm


def register(sub: Any) -> None:
    p = add_command(sub, "slurm", "run a cluster step as a Slurm job", __doc__)
    s = p.add_subparsers(dest="slurm_cmd", metavar="SUBCOMMAND", required=True)
    d = s.add_parser("submit", help="sbatch a step (srun, one task per node) and follow it")
    d.add_argument("--job-name", type=argtypes.text, required=True)
    d.add_argument("--step", type=argtypes.text, default=None, help="step name in the record")
    d.add_argument("--nodelist", type=argtypes.text, required=True, help="Slurm node names, a,b,c")
    d.add_argument("--timeout", type=argtypes.timeout_s, required=True, help="run limit, seconds")
    d.add_argument(
        "--start-timeout",
        type=argtypes.timeout_s,
        default=120.0,
        help="cancel when still pending after this many seconds (default 120)",
    )
    d.add_argument("--output", type=argtypes.text, required=True, help="sbatch --output")
    d.add_argument("--record", type=argtypes.text, required=True, help="result file to write")
    d.add_argument("--node", default=socket.gethostname().split(".")[0], help="node in records")
    d.add_argument("--partition", type=argtypes.text, default=None)
    d.add_argument("--account", type=argtypes.text, default=None)
    d.add_argument("--qos", type=argtypes.text, default=None)
    d.add_argument("--reservation", type=argtypes.text, default=None)
    d.add_argument("--gres", type=argtypes.text, default=None, help="per node, e.g. gpu:8")
    d.add_argument("--no-exclusive", dest="exclusive", action="store_false", help="share the nodes")
    d.add_argument("--poll", type=argtypes.float_range(0.1, 60), default=1.0, help="seconds")
    d.add_argument("task", nargs=argparse.REMAINDER, help="-- the task command srun runs")
    d.set_defaults(func=run)
    n = s.add_parser("nodes", help="the nodes' Slurm states and the order of an allocation (JSON)")
    n.add_argument("names", type=argtypes.text, help="Slurm node names, a,b,c")
    n.set_defaults(func=run_nodes)


def run_nodes(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.names.split(",") if n.strip()]
    info = slurm.node_info(names)
    print(json.dumps(info.to_dict()))
    return 0


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise slurm.Interrupted(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    task = args.task[1:] if args.task[:1] == ["--"] else args.task
    if not task:
        raise GpufleetError("gpufleet slurm submit: no task command after --")
    options = slurm.JobOptions(
        partition=args.partition or "",
        account=args.account or "",
        qos=args.qos or "",
        reservation=args.reservation or "",
        gres=args.gres or "",
        exclusive=args.exclusive,
    )
    nodelist = [n.strip() for n in args.nodelist.split(",") if n.strip()]
    argv = slurm.sbatch_argv(
        job_name=args.job_name,
        nodelist=nodelist,
        time_min=slurm.time_limit_minutes(args.timeout),
        output=args.output,
        options=options,
    )
    script = slurm.batch_script(task, len(nodelist))
    step = args.step or args.job_name
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t0 = time.monotonic()
    outcome = slurm.JobOutcome(job_name=args.job_name, submitted_at=time.time())
    previous = {
        s: signal.signal(s, _raise_interrupted)
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        try:
            outcome.job_id = slurm.submit(argv, script)
            print(
                f"slurm: submitted job {outcome.job_id} ({args.job_name}) on {args.nodelist}",
                flush=True,
            )
            slurm.wait(
                outcome,
                start_timeout=args.start_timeout,
                run_timeout=args.timeout,
                poll_s=args.poll,
                progress=lambda m: print(m, flush=True),
            )
        except slurm.Interrupted as exc:
            for s in previous:  # a second signal must not cut the cancel short
                signal.signal(s, signal.SIG_IGN)
            outcome.cancelled = True
            outcome.cancel_reason = f"gpufleet was interrupted ({exc})"
        except GpufleetError as exc:
            outcome.error = str(exc)
        finally:
            # every way out but a job that ended by itself cancels it
            if outcome.job_id and outcome.state not in slurm.DONE_STATES:
                outcome.cancelled = True
                outcome.cancel_reason = outcome.cancel_reason or "gpufleet stopped following it"
                try:
                    complaint = slurm.cancel(outcome.job_id)
                except GpufleetError as exc:
                    complaint = str(exc)
                if complaint:
                    outcome.error = "; ".join(
                        x
                        for x in (outcome.error, f"scancel {outcome.job_id} failed: {complaint}")
                        if x
                    )
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    text = outcome.summary()
    remedy = ""
    if not outcome.ok:
        remedy = (
            "the job never started: check `sinfo -R` and `squeue -j "
            f"{outcome.job_id or '<id>'} -o %r` (a node down or drained, a partition, account "
            "or reservation that does not admit the job); raise verify_slurm_start_timeout for "
            "a busy cluster"
            if outcome.started_after_s is None
            else "read the per-node launch logs (<step>.log) of this step in the report"
        )
    ResultFile(
        kind=f"slurm-{step}",
        node=args.node,
        mode="slurm",
        started=started,
        duration_s=time.monotonic() - t0,
        records=[
            Record(
                name="slurm_job",
                status="pass" if outcome.ok else "fail",
                node=args.node,
                value=outcome.job_id or None,
                threshold="COMPLETED, exit 0",
                message=text,
                remedy=remedy,
            )
        ],
        meta={"launcher": "slurm", "step": step, "sbatch": argv, **outcome.to_dict()},
    ).write(args.record)
    print(text, flush=True)
    return 0 if outcome.ok else 1
