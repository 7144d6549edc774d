"""Slurm as gpufleet's launcher and as the consumer of its node health (docs/slurm.md).

Two jobs, both through Slurm's own commands (``sbatch``, ``scontrol``, ``scancel``), never
its files or daemons:

* **Launch** (``gpufleet slurm submit``): one batch job per cluster step. The batch script
  runs ``srun --ntasks-per-node=1`` with the step's task script, which every node keeps at
  the same path and which starts torchrun exactly as the SSH launcher does (supervised,
  own process group, hard timeout). The rendezvous is on the first host of the allocation
  (``scontrol show hostnames $SLURM_JOB_NODELIST``), node ranks are ``$SLURM_NODEID``.
  A job still pending after ``start_timeout`` is cancelled and reported with Slurm's
  reason; a job running past its limit is cancelled; an interrupted submitter cancels its
  job. Every way out runs ``scancel`` unless the job ended by itself.
* **Health** (``gpufleet health --slurm``): drain a node whose fast checks fail with the
  reason ``gpufleet: <check>: <value>`` once the failure is due (gpufleet.node.drain_policy:
  failed passes in a row, or a critical Xid or lost GPU at once); resume a node that gpufleet
  drained once its checks pass; never resume a node drained for another reason.

Facts (Slurm 22.05 man pages: sbatch(1), srun(1), scontrol(1), slurm.conf(5)): ``sbatch
--parsable`` prints ``<jobid>[;<cluster>]``; ``scontrol show job -o`` prints one line of
``Key=Value`` pairs (``JobState``, ``Reason``, ``ExitCode=<rc>:<signal>``, ``NodeList``);
``scontrol show node -o`` likewise (``State=IDLE+DRAIN``, ``Reason=...``); a job record
stays visible for ``MinJobAge`` seconds (default 300) after it ends.
"""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from gpufleet.errors import GpufleetError, RefusedError
from gpufleet.inputs.known import (
    SLURM_GRES_ALLOWED,
    SLURM_GRES_RE,
    SLURM_NAME_ALLOWED,
    SLURM_NAME_RE,
)
from gpufleet.provisioning.slurm_nodes import (
    HEALTH_PREFIX,
    clean_reason,
    drain_argv,
    is_drained,
    parse_show_line,
    resume_argv,
)
from gpufleet.verify.launchers.base import UNKNOWN_RC, Command, Launcher, Outcome, Step

#: Prefix of every drain reason gpufleet sets; a drain with another reason is not ours.
REASON_PREFIX = HEALTH_PREFIX
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})
DONE_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)

Runner = Callable[[Sequence[str], str | None], "subprocess.CompletedProcess[str]"]


def run_cmd(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real runner: a Slurm command with a bound on its own time."""
    try:
        return subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, check=False, timeout=60
        )
    except FileNotFoundError as exc:
        raise GpufleetError(
            f"{argv[0]} not found: this host has no Slurm client. Run the Slurm steps from a "
            "host with Slurm's commands (verify_slurm_submit_host) or use gpufleet_launcher=ssh"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GpufleetError(
            f"{' '.join(argv[:3])} did not answer in 60 s: is slurmctld up (scontrol ping)?"
        ) from exc


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class JobOptions:
    """Where and how a job may run: the site's partition, account, QOS, reservation."""

    partition: str = ""
    account: str = ""
    qos: str = ""
    reservation: str = ""
    gres: str = ""  # per node, e.g. gpu:8 or gpu:h100:8; "" = none
    exclusive: bool = True

    def __post_init__(self) -> None:
        for key in ("partition", "account", "qos", "reservation"):
            value = getattr(self, key)
            if value and not SLURM_NAME_RE.fullmatch(value):
                raise RefusedError(
                    f"slurm {key}={value!r} is refused -> allowed: {SLURM_NAME_ALLOWED}"
                )
        if self.gres and not SLURM_GRES_RE.fullmatch(self.gres):
            raise RefusedError(
                f"slurm gres={self.gres!r} is refused -> allowed: {SLURM_GRES_ALLOWED}"
            )


def time_limit_minutes(timeout_s: float, margin_s: float = 60.0) -> int:
    """Job time limit (``--time`` minutes) for a step supervised for ``timeout_s``: the
    supervisor's limit plus a margin for start-up and teardown, rounded up."""
    return max(1, math.ceil((timeout_s + margin_s) / 60.0))


def batch_script(task_argv: Sequence[str], nodes: int) -> str:
    """The batch script: one task per node, each running the step's task script."""
    srun = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        # every task runs to its own end: a failing rank must not get its peers killed by
        # Slurm, or the report would blame healthy nodes (the supervisor bounds the time)
        "--kill-on-bad-exit=0",
        "--wait=0",
        *task_argv,
    ]
    return (
        "#!/bin/bash\n"
        "# gpufleet: one task per node; each task starts torchrun on its node\n"
        'echo "gpufleet: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST"\n'
        f"exec {shlex.join(srun)}\n"
    )


def sbatch_argv(
    *,
    job_name: str,
    nodelist: Sequence[str],
    time_min: int,
    output: str,
    options: JobOptions,
    workdir: str = "/",
) -> list[str]:
    if not SLURM_NAME_RE.fullmatch(job_name):
        raise RefusedError(f"slurm job name {job_name!r} is refused -> allowed: a Slurm name")
    bad = [n for n in nodelist if not SLURM_NAME_RE.fullmatch(n)]
    if bad or not nodelist:
        raise RefusedError(
            f"slurm node list {list(nodelist)!r} is refused -> allowed: one or more "
            f"node names, each {SLURM_NAME_ALLOWED}"
        )
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name}",
        f"--nodes={len(nodelist)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(nodelist)}",
        f"--time={time_min}",
        f"--output={output}",
        f"--chdir={workdir}",
        # no requeue: a verify step that failed must be reported, not silently run again
        "--no-requeue",
    ]
    for key in ("partition", "account", "qos", "reservation"):
        value = getattr(options, key)
        if value:
            argv.append(f"--{key}={value}")
    if options.gres:
        argv.append(f"--gres={options.gres}")
    if options.exclusive:
        argv.append("--exclusive")
    return argv


def parse_sbatch(stdout: str) -> str:
    """``sbatch --parsable`` output → job id (``1234`` or ``1234;cluster``)."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job = first.split(";", 1)[0].strip()
    if not job.isdigit():
        raise GpufleetError(f"sbatch printed no job id (got {stdout.strip()!r})")
    return job


def task_script(
    *,
    node: str,
    step: str,
    head: Sequence[str],
    tail: Sequence[str],
    addresses: Mapping[str, str],
    rc_file: str,
    env: Mapping[str, str] | None = None,
) -> str:
    """The task script srun runs on every node of a step (same path on each node, this
    node's own contents). ``head`` is the supervised launcher up to ``torch.distributed.run``,
    ``tail`` the rest of torchrun's arguments; the placement comes from Slurm: node rank
    ``$SLURM_NODEID``, ``$SLURM_NNODES`` nodes, the rendezvous on the first host of the
    allocation, whose cluster address ``addresses`` ({slurm node name: address}) gives.
    The exit status lands in ``rc_file`` (the node's verdict, read by verify)."""
    bad = [n for n in addresses if not SLURM_NAME_RE.fullmatch(n)]
    if bad or not addresses:
        raise RefusedError(f"slurm node names {bad or '[]'} are refused -> allowed: Slurm names")
    for what, value in (("node", node), ("step", step)):
        # both are written into the script's text (a comment, an echo): names only
        if not SLURM_NAME_RE.fullmatch(value):
            raise RefusedError(
                f"slurm task {what} {value!r} is refused -> allowed: {SLURM_NAME_ALLOWED}"
            )
    cases = "".join(
        f"  {name}) master={shlex.quote(addr)} ;;\n" for name, addr in sorted(addresses.items())
    )
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted((env or {}).items()))
    placement = '--nnodes "$SLURM_NNODES" --node-rank "$SLURM_NODEID" --master-addr "$master"'
    rc = shlex.quote(rc_file)
    return (
        "#!/bin/bash\n"
        f"# gpufleet: step {step} on {node}, started by srun (one task per node)\n"
        "set -u\n"
        f"{exports}"
        f"rm -f -- {rc}\n"
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)\n'
        'case "$first" in\n'
        f"{cases}"
        '  *) echo "gpufleet: the first host of the allocation ($first) is not a node of this '
        'run" >&2\n'
        f"     echo 97 > {rc}; exit 97 ;;\n"
        "esac\n"
        f'echo "gpufleet: {step} on $(hostname): node rank $SLURM_NODEID of $SLURM_NNODES, '
        'rendezvous $master ($first), job $SLURM_JOB_ID"\n'
        f"{shlex.join(head)} {placement} {shlex.join(tail)}\n"
        "rc=$?\n"
        f'echo "$rc" > {rc}\n'
        'exit "$rc"\n'
    )


# --------------------------------------------------------------------------- scontrol


def job_state(fields: Mapping[str, str]) -> str:
    """``JobState`` without decorations (``CANCELLED by 0`` → ``CANCELLED``)."""
    return fields.get("JobState", "").split()[0] if fields.get("JobState") else ""


def exit_code(fields: Mapping[str, str]) -> tuple[int | None, int | None]:
    """``ExitCode=1:0`` → (1, 0): the batch script's exit status and the signal."""
    raw = fields.get("ExitCode", "")
    m = re.fullmatch(r"(\d+):(\d+)", raw)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key of a node name the way a Slurm hostlist sorts it: prefix, then number."""
    return tuple(
        (0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p
    )


@dataclass
class NodeInfo:
    """What Slurm says about the nodes of a run (``gpufleet slurm nodes``)."""

    order: list[str]  # Slurm's order: the first host of an allocation of them comes first
    states: dict[str, str]  # name -> State (IDLE, IDLE+DRAIN, DOWN*, ...)
    reasons: dict[str, str]  # name -> Reason (drained or down nodes)
    missing: list[str]  # names slurmctld does not know

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def node_info(names: Sequence[str], *, runner: Runner = run_cmd) -> NodeInfo:
    """Ask slurmctld about each node and for the order of an allocation of them."""
    bad = [n for n in names if not SLURM_NAME_RE.fullmatch(n)]
    if bad or not names:
        raise RefusedError(
            f"slurm node names {list(names)!r} are refused -> allowed: {SLURM_NAME_ALLOWED}"
        )
    states: dict[str, str] = {}
    reasons: dict[str, str] = {}
    missing: list[str] = []
    for name in names:
        r = runner(["scontrol", "show", "node", "-o", name], None)
        if r.returncode != 0:
            text = (r.stderr or r.stdout).strip()
            if "not found" in text.lower() or "invalid node name" in text.lower():
                missing.append(name)
                continue
            raise GpufleetError(f"scontrol show node {name} failed: {text} (is slurmctld up?)")
        fields = parse_show_line(r.stdout)
        states[name] = fields.get("State", "")
        if fields.get("Reason"):
            reasons[name] = fields["Reason"]
    known = [n for n in names if n not in missing]
    order = sorted(known, key=natural_key)
    if known:
        r = runner(["scontrol", "show", "hostlistsorted", ",".join(known)], None)
        if r.returncode == 0 and r.stdout.strip():
            expanded = runner(["scontrol", "show", "hostnames", r.stdout.strip()], None)
            listed = expanded.stdout.split() if expanded.returncode == 0 else []
            if sorted(listed) == sorted(known):
                order = listed
    return NodeInfo(order=order, states=states, reasons=reasons, missing=missing)


def hosts_in_order(slurm_names: Mapping[str, str], order: Sequence[str]) -> list[str]:
    """Inventory hosts ({host: slurm name}) in Slurm's ``order``; every host must be there."""
    by_name: dict[str, str] = {}
    for host, name in slurm_names.items():
        if name in by_name:
            raise RefusedError(
                f"gpufleet_slurm_node_name={name!r} is used by {by_name[name]} and {host} -> "
                "allowed: one Slurm node per inventory host"
            )
        by_name[name] = host
    out = [by_name[n] for n in order if n in by_name]
    left = sorted(set(slurm_names) - set(out))
    if left:
        raise GpufleetError(f"Slurm's node order misses {', '.join(left)}")
    return out


def jobs_from_parts(parts: Sequence[Mapping[str, Any]], step: str) -> list[dict[str, Any]]:
    """The jobs of one verify step: the nodes' parts ({step, launch, host, slurm_name})
    grouped by launch, in first-seen order; a launch = one job."""
    jobs: dict[str, dict[str, Any]] = {}
    for part in parts:
        if part.get("step") != step:
            continue
        job = jobs.setdefault(
            str(part["launch"]), {"launch": part["launch"], "hosts": [], "names": []}
        )
        job["hosts"].append(part["host"])
        job["names"].append(part["slurm_name"])
    return list(jobs.values())


# --------------------------------------------------------------------------- jobs


@dataclass
class JobOutcome:
    """What happened to one submitted job (``<step>.slurm.json``)."""

    job_id: str = ""
    job_name: str = ""
    state: str = ""  # last JobState seen
    reason: str = ""  # Slurm's Reason while pending / at the end
    exit_code: int | None = None
    signal: int | None = None
    nodes: str = ""  # NodeList of the allocation
    submitted_at: float = 0.0
    started_after_s: float | None = None
    ended_after_s: float | None = None
    cancelled: bool = False
    cancel_reason: str = ""
    error: str = ""
    polls: int = 0
    history: list[str] = field(default_factory=list)  # state changes "t+12.0s RUNNING"

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0 and not self.error

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d

    def summary(self) -> str:
        if self.error:
            return f"slurm: {self.error}"
        ran = (
            "never started"
            if self.started_after_s is None
            else f"started after {self.started_after_s:.0f}s"
        )
        text = f"slurm job {self.job_id} ({self.job_name}): {self.state or 'unknown'}, {ran}"
        if self.exit_code is not None:
            text += f", exit {self.exit_code}" + (f" signal {self.signal}" if self.signal else "")
        if self.reason and self.reason not in ("None", "(null)"):
            text += f", reason {self.reason}"
        if self.cancelled:
            text += f"; cancelled by gpufleet: {self.cancel_reason}"
        return text


class Interrupted(Exception):
    """The submitter was told to stop (SIGTERM/SIGINT/SIGHUP): cancel the job."""


def submit(
    argv: Sequence[str],
    script: str,
    *,
    runner: Runner = run_cmd,
) -> str:
    r = runner(argv, script)
    if r.returncode != 0:
        raise GpufleetError(
            f"sbatch refused the job (rc {r.returncode}): {(r.stderr or r.stdout).strip()} "
            "-> check the partition/account/QOS/reservation variables and `sinfo`"
        )
    return parse_sbatch(r.stdout)


def cancel(job_id: str, *, runner: Runner = run_cmd) -> str:
    """scancel the job; returns scancel's complaint, "" when it was accepted."""
    r = runner(["scancel", job_id], None)
    return "" if r.returncode == 0 else (r.stderr or r.stdout).strip()


def wait(
    outcome: JobOutcome,
    *,
    start_timeout: float,
    run_timeout: float,
    runner: Runner = run_cmd,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = 1.0,
    progress: Callable[[str], None] | None = None,
) -> JobOutcome:
    """Follow the job until it ends; cancel it past ``start_timeout`` pending or
    ``run_timeout`` running (both seconds). Raises Interrupted through ``sleep``."""
    t0 = clock()
    started: float | None = None
    last = ""
    gone = 0
    while True:
        r = runner(["scontrol", "show", "job", "-o", outcome.job_id], None)
        outcome.polls += 1
        now = clock() - t0
        if r.returncode != 0:
            # the record is gone (MinJobAge passed, slurmctld restarted): nothing more to read
            gone += 1
            if gone >= 3:
                if outcome.state in DONE_STATES:
                    return outcome
                outcome.error = (
                    f"job {outcome.job_id} vanished from slurmctld while "
                    f"{outcome.state or 'unknown'} ({(r.stderr or r.stdout).strip()})"
                )
                return outcome
            sleep(poll_s)
            continue
        gone = 0
        fields = parse_show_line(r.stdout)
        state = job_state(fields)
        outcome.state = state
        outcome.reason = fields.get("Reason", outcome.reason)
        outcome.nodes = fields.get("NodeList", outcome.nodes)
        if state != last:
            outcome.history.append(f"t+{now:.1f}s {state}")
            if progress:
                progress(
                    f"slurm job {outcome.job_id}: {state}"
                    + (f" ({outcome.reason})" if state in PENDING_STATES else "")
                )
            last = state
        if state in RUNNING_STATES and started is None:
            started = now
            outcome.started_after_s = round(now, 1)
        if state in DONE_STATES:
            outcome.exit_code, outcome.signal = exit_code(fields)
            outcome.ended_after_s = round(now, 1)
            if outcome.started_after_s is None and state != "CANCELLED":
                outcome.started_after_s = outcome.ended_after_s
            return outcome
        if started is None and now > start_timeout:
            outcome.cancelled = True
            outcome.cancel_reason = (
                f"still {state} after {start_timeout:g}s (reason {outcome.reason or 'none'})"
            )
            _cancel_and_settle(outcome, runner, sleep)
            return outcome
        if started is not None and now - started > run_timeout:
            outcome.cancelled = True
            outcome.cancel_reason = f"running past {run_timeout:g}s"
            _cancel_and_settle(outcome, runner, sleep)
            return outcome
        sleep(poll_s)


def _cancel_and_settle(outcome: JobOutcome, runner: Runner, sleep: Callable[[float], None]) -> None:
    complaint = cancel(outcome.job_id, runner=runner)
    if complaint:
        outcome.error = f"scancel {outcome.job_id} failed: {complaint}"
    # read the final state once scancel took effect (a few polls at most)
    for _ in range(10):
        r = runner(["scontrol", "show", "job", "-o", outcome.job_id], None)
        if r.returncode != 0:
            return
        fields = parse_show_line(r.stdout)
        state = job_state(fields)
        if state in DONE_STATES:
            outcome.state = state
            outcome.exit_code, outcome.signal = exit_code(fields)
            return
        sleep(0.5)


# --------------------------------------------------------------------------- launcher

#: run_cmd's bound on one Slurm command (sbatch, scontrol, scancel)
COMMAND_BOUND_S = 60.0
#: verify's wait for ``gpufleet slurm submit`` ends this long after its start and run limits
SUBMIT_MARGIN_S = 120.0


@dataclass(frozen=True)
class SlurmLauncher(Launcher):
    """The slurm launcher: one Slurm job per step, sbatch on the submit host, srun starting
    the step's task script on every node (the role's roles/verify/tasks/launch_slurm.yml,
    through ``gpufleet slurm submit``)."""

    name: ClassVar[str] = "slurm"
    description: ClassVar[str] = (
        "one Slurm job per step: sbatch from verify_slurm_submit_host, srun with one task per node"
    )
    options: JobOptions = JobOptions()

    def job_name(self, step: Step) -> str:
        return f"gpufleet-{step.name}"

    def start(self, step: Step) -> Command:
        """sbatch with the batch script on stdin; prints the job id (:func:`parse_sbatch`)."""
        if not step.output:
            raise ValueError(f"step {step.name}: the slurm launcher needs the job's output path")
        argv = sbatch_argv(
            job_name=self.job_name(step),
            nodelist=step.nodes,
            time_min=time_limit_minutes(step.timeout_s),
            output=step.output,
            options=self.options,
        )
        return Command(tuple(argv), COMMAND_BOUND_S, batch_script(step.argv, len(step.nodes)))

    def wait(self, step: Step, job: str) -> Command:
        """The poll :func:`wait` repeats; the bound is the whole wait's: pending up to the
        start limit, running up to the step's timeout, plus the margin verify allows."""
        _need_job(step, job)
        return Command(
            ("scontrol", "show", "job", "-o", job),
            step.start_timeout_s + step.timeout_s + SUBMIT_MARGIN_S,
        )

    def collect(self, step: Step, output: str) -> Outcome:
        """``output``: the node's ``<step>.rc`` file (written by the task script)."""
        text = output.strip()
        if text.isdigit():
            return Outcome(rc=int(text), state="done")
        return Outcome(
            rc=UNKNOWN_RC,
            state="no-exit-status",
            msg=f"step {step.name} left no exit status on this node: the job was cancelled "
            "while pending, or srun did not reach the node",
        )

    def cancel(self, step: Step, job: str) -> Command:
        _need_job(step, job)
        return Command(("scancel", job), COMMAND_BOUND_S)

    def report_names(self, hosts: Mapping[str, str]) -> dict[str, str]:
        """gpufleet_slurm_node_name, else the host's short name (roles/verify/tasks/
        launch_slurm_prepare.yml)."""
        return {host: name or host.split(".")[0] for host, name in hosts.items()}


def _need_job(step: Step, job: str) -> None:
    if not job.isdigit():
        raise ValueError(f"step {step.name}: a Slurm job id is digits, got {job!r}")


LAUNCHER = SlurmLauncher()


# --------------------------------------------------------------------------- health


@dataclass(frozen=True)
class HealthAction:
    """What the health run does to the node in Slurm."""

    action: str  # "drain", "resume" or "none"
    reason: str  # the drain reason (drain), or why nothing is done
    argv: tuple[str, ...] = ()


def drain_reason(failures: Sequence[tuple[str, str]]) -> str:
    """``gpufleet: <check>: <value>`` for the first failed check (one line, bounded)."""
    if not failures:
        return ""
    check, value = failures[0]
    text = f"{REASON_PREFIX} {check}: {value}"
    if len(failures) > 1:
        text += f" (+{len(failures) - 1} more)"
    return clean_reason(text)


def drained_by_gpufleet(fields: Mapping[str, str]) -> bool:
    """The node is drained (or draining) with a reason gpufleet set."""
    return is_drained(fields) and fields.get("Reason", "").startswith(REASON_PREFIX)


def health_action(
    node: str,
    fields: Mapping[str, str],
    failures: Sequence[tuple[str, str]],
    *,
    due: bool = True,
    not_yet: str = "",
) -> HealthAction:
    """Drain on failure, resume our own drain on success, leave others' drains alone. A
    failure that is not ``due`` yet (gpufleet.node.drain_policy: fewer failed passes in a row
    than drain_after) drains nothing; ``not_yet`` says why. A node gpufleet already drained
    stays drained."""
    drained = is_drained(fields)
    current = fields.get("Reason", "")
    ours = current.startswith(REASON_PREFIX)
    if failures:
        reason = drain_reason(failures)
        if drained and not ours:
            return HealthAction(
                "none",
                f"{node} is already drained by someone else ({current or 'no reason'}); "
                f"gpufleet leaves it: {reason}",
            )
        if not due and not drained:
            return HealthAction("none", f"{node} not drained: {not_yet or reason}")
        if drained and current.split(" [", 1)[0] == reason:
            return HealthAction("none", f"{node} stays drained: {reason}")
        return HealthAction(
            "drain",
            reason,
            tuple(drain_argv(node, reason)),
        )
    if drained and ours:
        return HealthAction(
            "resume",
            f"checks pass again; resuming {node} (was: {current})",
            tuple(resume_argv(node)),
        )
    if drained:
        return HealthAction(
            "none", f"{node} is drained by someone else ({current or 'no reason'}); not resumed"
        )
    return HealthAction("none", f"{node} is healthy")
