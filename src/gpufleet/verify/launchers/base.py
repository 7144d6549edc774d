"""What a launcher is: how the ranks of one verify step (all-reduce, training, a bisection
round, make run's script) start on the nodes, how long they may take, how their result comes
back and how they are stopped.

One module per launcher (gpufleet.verify.launchers.ssh, gpufleet.verify.launchers.slurm), one
entry in gpufleet.verify.launchers.registry, and the verify role's two task files named
after it (:meth:`Launcher.task_files`), which roles/verify/tasks/launch.yml and prepare.yml
include by ``gpufleet_launcher``:

- ``launch_<name>.yml`` runs one step on this node. Inputs: ``__verify_launch`` (the step),
  ``__verify_launch_head`` and ``__verify_launch_tail`` (the supervised torchrun command
  around the placement: ``--nnodes``, ``--node-rank``, ``--master-addr``, which the launcher
  supplies), ``__verify_launch_nnodes``, ``__verify_launch_rank``,
  ``__verify_launch_addr``, ``__verify_launch_step`` (launches started together),
  ``verify_launch_timeout``. Output: ``__verify_job_done.rc``, torchrun's exit status on
  this node (-1: none), and optionally ``__verify_launch_unscheduled`` (the step never got
  its nodes). It leaves no process of the step behind (launch_kill.yml).
- ``launch_<name>_prepare.yml`` runs once per run after the ranks per node are known.
  Output: ``__verify_launcher_names`` ({inventory host: the launcher's name of the node},
  {} when the launcher uses the inventory's names: the report maps the launcher's messages
  to nodes with it); it may reorder ``__verify_nodes`` and set ``__verify_master``.

The classes here say the same in Python: the commands each launcher runs, with their
bounds, for gpufleet's own callers (``gpufleet slurm submit``, the node_job action) and tests.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

#: a node's step left no exit status (never started, killed, cancelled): a failure
UNKNOWN_RC = -1


@dataclass(frozen=True)
class Step:
    """One step as a launcher starts it."""

    #: the launch: allreduce, train, train-1node, bisect-<round>-<group>, run
    name: str
    #: what runs on each node: the supervised torchrun command (ssh: with this node's
    #: placement; slurm: the task script srun starts, which places itself)
    argv: tuple[str, ...]
    #: verify_launch_timeout: gpufleet.verify.workers.supervise stops torchrun past it
    timeout_s: float
    #: this node's run directory (<verify_work_dir>/<run id>/<node>)
    run_dir: str = ""
    #: the launcher's names of the step's nodes (slurm: --nodelist)
    nodes: tuple[str, ...] = ()
    #: how long the step may wait for its nodes before it is cancelled (slurm: pending)
    start_timeout_s: float = 0.0
    #: the launcher's own log of the step (slurm: sbatch --output)
    output: str = ""

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name in (".", ".."):
            raise ValueError(f"a step name is a plain file name, got {self.name!r}")
        if not self.argv:
            raise ValueError(f"step {self.name}: no command to launch")
        if self.timeout_s <= 0 or self.start_timeout_s < 0:
            raise ValueError(
                f"step {self.name}: timeout_s must be > 0 and start_timeout_s >= 0, got "
                f"{self.timeout_s:g} and {self.start_timeout_s:g}"
            )


@dataclass(frozen=True)
class Command:
    """One command a launcher runs, and the most it may take (seconds) before its caller
    gives up on it."""

    argv: tuple[str, ...]
    bound_s: float
    stdin: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A step's result on one node."""

    rc: int
    #: done, or why there is no exit status (timeout, lost, never-started, unscheduled)
    state: str
    msg: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Launcher(abc.ABC):
    """How the ranks of a step start, end and are stopped. Subclasses set ``name`` (the
    gpufleet_launcher value) and ``description`` (one line, for the docs and --help)."""

    name: ClassVar[str]
    description: ClassVar[str]

    def task_files(self) -> tuple[str, str]:
        """The verify role's task files of this launcher (roles/verify/tasks/)."""
        return (f"launch_{self.name}.yml", f"launch_{self.name}_prepare.yml")

    @abc.abstractmethod
    def start(self, step: Step) -> Command:
        """The command that starts the step's ranks and returns (a job id or PID on stdout)."""

    @abc.abstractmethod
    def wait(self, step: Step, job: str) -> Command:
        """The command that waits for the step started as ``job``; its bound is the longest
        the step may take, start included, before the launcher stops it."""

    @abc.abstractmethod
    def collect(self, step: Step, output: str) -> Outcome:
        """The node's result from what the wait left: its output (ssh) or the node's rc file
        (slurm)."""

    @abc.abstractmethod
    def cancel(self, step: Step, job: str) -> Command:
        """The command that stops whatever is left of the step."""

    def report_names(self, hosts: Mapping[str, str]) -> dict[str, str]:
        """{inventory host: the launcher's node name} for the report, from {host: the name
        the inventory configures, '' for none}; {} when the launcher uses the inventory's
        names."""
        del hosts
        return {}


def describe(launchers: Iterable[Launcher]) -> list[str]:
    """``name: description`` lines (the role README's table, --help)."""
    return [f"{launcher.name}: {launcher.description}" for launcher in launchers]
