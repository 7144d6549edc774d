"""The ssh launcher: torchrun on every node over SSH, as a detached node job
(gpufleet.verify.detached_job's scripts, sent by the action gpufleet.core.node_job; the
role's roles/verify/tasks/launch_ssh.yml).

Each node starts its own ranks at once (the start returns when the job recorded its PID),
then one command per node waits for the job's exit status, at most the step's timeout plus
:data:`WAIT_MARGIN_S` (gpufleet.verify.workers.supervise stops torchrun at the timeout;
this is the backstop), and stops what is left of the job's process group and torchrun's.
"""

from __future__ import annotations

from typing import ClassVar

from gpufleet.verify import detached_job
from gpufleet.verify.launchers.base import Command, Launcher, Outcome, Step

#: the start script waits this long for the job to record its PID
START_BOUND_S = 10.0
#: the wait stops the job this long after the step's timeout (supervise stops it first)
WAIT_MARGIN_S = 30.0
#: the caller gives up on the wait command itself this long after the step's timeout
TASK_MARGIN_S = 60.0
#: stopping a group takes 3 s (SIGTERM, then SIGKILL); two groups, with room to spare
STOP_BOUND_S = 10.0


def jobs_dir(step: Step) -> str:
    """Where the node job's files (.pid, .out, .err, .rc) are: <run dir>/.jobs."""
    return f"{step.run_dir}/.jobs"


def pidfiles(step: Step) -> tuple[str, str]:
    """The PID files of the step's process groups: the node job's, and torchrun's (recorded
    by gpufleet.verify.workers.supervise --pidfile <run dir>/<step>.pid)."""
    return (f"{jobs_dir(step)}/{step.name}.pid", f"{step.run_dir}/{step.name}.pid")


class SshLauncher(Launcher):
    name: ClassVar[str] = "ssh"
    description: ClassVar[str] = (
        "torchrun on every node over SSH, started as a detached job on each node"
    )

    def start(self, step: Step) -> Command:
        _need_run_dir(step)
        argv = ("sh", "-c", detached_job.START_SCRIPT, "node-job", jobs_dir(step), step.name)
        return Command(argv + step.argv, START_BOUND_S)

    def wait(self, step: Step, job: str = "") -> Command:
        """``job`` is not needed: the node job is found by the step's name."""
        del job
        _need_run_dir(step)
        max_wait = int(step.timeout_s + WAIT_MARGIN_S)
        argv = ("sh", "-c", detached_job.WAIT_SCRIPT, "node-wait", jobs_dir(step), step.name)
        # supervise's own pidfile: torchrun's group, stopped after the job's
        return Command((*argv, str(max_wait), pidfiles(step)[1]), step.timeout_s + TASK_MARGIN_S)

    def collect(self, step: Step, output: str) -> Outcome:
        waited = detached_job.parse_wait(output)
        return Outcome(rc=int(waited["rc"]), state=str(waited["state"]), msg=str(waited["msg"]))

    def cancel(self, step: Step, job: str = "") -> Command:
        del job
        _need_run_dir(step)
        argv = ("sh", "-c", detached_job.STOP_SCRIPT, "node-stop", *pidfiles(step))
        return Command(argv, STOP_BOUND_S)


def _need_run_dir(step: Step) -> None:
    if not step.run_dir.startswith("/"):
        raise ValueError(
            f"step {step.name}: the ssh launcher needs the node's run directory (absolute), "
            f"got {step.run_dir!r}"
        )


LAUNCHER = SshLauncher()
