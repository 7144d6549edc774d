"""gpufleet.verify.launchers.slurm: sbatch arguments, the batch and task scripts, scontrol parsing, following a
job (start timeout, run timeout, cancel), drain/resume decisions. Slurm's commands are
played by a scripted runner; the real Slurm runs in tests/integration/test_testbed_slurm.py."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.errors import GpufleetError, RefusedError
from gpufleet.provisioning import slurm_nodes
from gpufleet.verify.launchers import slurm

JOB_PENDING = (
    "JobId=42 JobName=gpufleet-allreduce UserId=root(0) JobState=PENDING "
    "Reason=ReqNodeNotAvail,_UnavailableNodes:node3 Dependency=(null) ExitCode=0:0 "
    "NodeList=(null) NumNodes=3"
)
JOB_RUNNING = "JobId=42 JobName=gpufleet-allreduce JobState=RUNNING Reason=None ExitCode=0:0 NodeList=node[1-3]"
JOB_DONE = "JobId=42 JobName=gpufleet-allreduce JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=node[1-3]"
JOB_FAILED = "JobId=42 JobName=gpufleet-allreduce JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 NodeList=node[1-3]"
JOB_CANCELLED = "JobId=42 JobName=gpufleet-allreduce JobState=CANCELLED Reason=None ExitCode=0:15"


class Slurm:
    """Answers Slurm commands from a script of job states; records every call."""

    def __init__(self, states: Sequence[str], *, after_cancel: str = JOB_CANCELLED) -> None:
        self.states = list(states)
        self.after_cancel = after_cancel
        self.calls: list[list[str]] = []
        self.cancelled = False

    def __call__(
        self, argv: Sequence[str], stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append(argv)
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 0, "42\n", "")
        if argv[0] == "scancel":
            self.cancelled = True
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[:3] == ["scontrol", "show", "job"]:
            if self.cancelled:
                return subprocess.CompletedProcess(argv, 0, self.after_cancel, "")
            line = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return subprocess.CompletedProcess(argv, 0, line, "")
        raise AssertionError(f"unexpected command {argv}")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def follow(fake: Slurm, start: float = 30, run: float = 100) -> slurm.JobOutcome:
    clock = Clock()
    out = slurm.JobOutcome(job_id="42", job_name="gpufleet-allreduce")
    return slurm.wait(
        out, start_timeout=start, run_timeout=run, runner=fake, clock=clock.now, sleep=clock.sleep
    )


def test_a_job_that_completes_is_ok_and_never_cancelled() -> None:
    fake = Slurm([JOB_PENDING, JOB_RUNNING, JOB_RUNNING, JOB_DONE])
    out = follow(fake)
    assert out.ok and out.state == "COMPLETED" and out.exit_code == 0
    assert out.started_after_s == 1.0 and out.ended_after_s == 3.0
    assert not any(c[0] == "scancel" for c in fake.calls)
    assert [h.split()[1] for h in out.history] == ["PENDING", "RUNNING", "COMPLETED"]


def test_a_failed_job_carries_its_exit_code() -> None:
    out = follow(Slurm([JOB_RUNNING, JOB_FAILED]))
    assert not out.ok and out.state == "FAILED" and out.exit_code == 1
    assert "exit 1" in out.summary()


def test_a_job_pending_past_the_start_limit_is_cancelled_with_slurms_reason() -> None:
    fake = Slurm([JOB_PENDING])
    out = follow(fake, start=5)
    assert ["scancel", "42"] in fake.calls
    assert out.cancelled and out.started_after_s is None and out.state == "CANCELLED"
    assert "ReqNodeNotAvail" in out.cancel_reason and "5s" in out.cancel_reason
    text = out.summary()
    assert "never started" in text and "cancelled by gpufleet" in text and "node3" in text
    # the limit holds: cancelled on the first poll past 5 s, not later
    assert out.polls <= 8


def test_a_job_running_past_its_limit_is_cancelled() -> None:
    fake = Slurm([JOB_RUNNING])
    out = follow(fake, run=10)
    assert ["scancel", "42"] in fake.calls
    assert out.cancelled and out.cancel_reason == "running past 10s"
    assert not out.ok


def test_a_vanished_job_record_is_an_error_unless_it_had_ended() -> None:
    class Gone(Slurm):
        def __call__(
            self, argv: Sequence[str], stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
            if list(argv[:3]) == ["scontrol", "show", "job"] and len(self.calls) > 1:
                self.calls.append(list(argv))
                return subprocess.CompletedProcess(
                    argv, 1, "", "slurm_load_jobs error: Invalid job id specified"
                )
            return super().__call__(argv, stdin)

    out = follow(Gone([JOB_RUNNING]))
    assert "vanished" in out.error and not out.ok


def test_sbatch_arguments_carry_the_site_options_and_refuse_shell_syntax() -> None:
    opts = slurm.JobOptions(
        partition="gpu", account="ml", qos="high", reservation="maint", gres="gpu:8"
    )
    argv = slurm.sbatch_argv(
        job_name="gpufleet-allreduce",
        nodelist=["node1", "node2"],
        time_min=6,
        output="/var/lib/gpufleet/runs/x/slurm-%j.out",
        options=opts,
    )
    for want in ("--parsable", "--nodes=2", "--ntasks-per-node=1", "--nodelist=node1,node2",
                 "--time=6", "--partition=gpu", "--account=ml", "--qos=high",
                 "--reservation=maint", "--gres=gpu:8", "--exclusive", "--no-requeue"):  # fmt: skip
        assert want in argv
    for bad in ("gpu;rm -rf /", "a b", "x\nssl", "[node1-2]"):
        with pytest.raises(RefusedError, match="refused"):
            slurm.JobOptions(partition=bad)
    with pytest.raises(RefusedError, match="GRES"):
        slurm.JobOptions(gres="gpu:8 --wrap=id")
    with pytest.raises(RefusedError):
        slurm.sbatch_argv(
            job_name="x", nodelist=["node1,node2"], time_min=1, output="o", options=opts
        )


@pytest.mark.parametrize(("timeout", "minutes"), [(1, 2), (300, 6), (360, 7), (3600, 61)])
def test_the_time_limit_covers_the_supervisor_limit_plus_a_margin(
    timeout: float, minutes: int
) -> None:
    assert slurm.time_limit_minutes(timeout) == minutes
    assert minutes * 60 >= timeout + 60


def test_parse_sbatch_takes_the_id_with_or_without_a_cluster() -> None:
    assert slurm.parse_sbatch("123\n") == "123"
    assert slurm.parse_sbatch("123;gftb\n") == "123"
    with pytest.raises(GpufleetError, match="no job id"):
        slurm.parse_sbatch("sbatch: error: Batch job submission failed")


def test_scontrol_lines_keep_values_with_spaces() -> None:
    node = (
        "NodeName=node2 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
        "Reason=gpufleet: nccl_env_interfaces: bad [root@2026-12-02T16:00:00] Comment=(null)"
    )
    f = slurm_nodes.parse_show_line(node)
    assert f["Reason"] == "gpufleet: nccl_env_interfaces: bad [root@2026-12-02T16:00:00]"
    assert slurm_nodes.node_flags(f) == {"IDLE", "DRAIN"}
    assert slurm_nodes.node_flags({"State": "DOWN*+DRAIN"}) == {"DOWN", "DRAIN"}
    # an admin's reason may hold '=': it still ends at its [user@time] stamp
    other = "NodeName=n1 State=IDLE+DRAIN Reason=swap DIMM=A3 [admin@2026-12-02T10:00:00] Comment=x"
    f = slurm_nodes.parse_show_line(other)
    assert f["Reason"] == "swap DIMM=A3 [admin@2026-12-02T10:00:00]" and f["Comment"] == "x"
    assert "DIMM" not in f
    assert slurm.exit_code(slurm_nodes.parse_show_line(JOB_FAILED)) == (1, 0)
    assert slurm.job_state({"JobState": "CANCELLED by 0"}) == "CANCELLED"


def test_the_batch_script_runs_one_task_per_node_and_never_kills_peers() -> None:
    text = slurm.batch_script(
        ["/bin/bash", "-c", 'exec /bin/bash "$0.$SLURMD_NODENAME.sh"', "/r/x.slurm"], 3
    )
    srun = shlex.split(text.splitlines()[-1])
    assert srun[:2] == ["exec", "srun"]
    assert "--ntasks-per-node=1" in srun and "--nodes=3" in srun and "--kill-on-bad-exit=0" in srun
    assert srun[-4:] == ["/bin/bash", "-c", 'exec /bin/bash "$0.$SLURMD_NODENAME.sh"', "/r/x.slurm"]


def test_the_task_script_places_the_rendezvous_on_the_first_host(tmp_path: Path) -> None:
    """Run the generated script with bash, Slurm's environment and a fake scontrol."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text("#!/bin/sh\necho node2; echo node1\n")
    (bindir / "scontrol").chmod(0o755)
    rc_file = tmp_path / "allreduce.rc"
    script = slurm.task_script(
        node="node1",
        step="allreduce",
        head=["/bin/echo", "HEAD", "a b"],
        tail=["--nproc-per-node", "2", "-m", "x"],
        addresses={"node1": "10.0.0.1", "node2": "10.0.0.2"},
        rc_file=str(rc_file),
        env={"GPUFLEET_RUN_ID": "20261202T000000Z-abc"},
    )
    path = tmp_path / "task.sh"
    path.write_text(script)
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_JOB_ID": "42",
    }
    r = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 0, r.stderr
    launched = r.stdout.strip().splitlines()[-1]
    assert launched == (
        "HEAD a b --nnodes 2 --node-rank 1 --master-addr 10.0.0.2 --nproc-per-node 2 -m x"
    )
    assert rc_file.read_text().strip() == "0"
    # a first host that is not a node of the run: exit 97, named, rc recorded
    (bindir / "scontrol").write_text("#!/bin/sh\necho stranger\n")
    r = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, check=False)
    assert r.returncode == 97 and "stranger" in r.stderr
    assert rc_file.read_text().strip() == "97"


@pytest.mark.parametrize(
    ("node", "step"),
    [
        ("node1\necho pwned", "allreduce"),
        ("node1", 'allreduce"; touch /tmp/x; "'),
        ("node1", "$(id)"),
        ("", "allreduce"),
    ],
)
def test_the_task_script_takes_only_names_for_node_and_step(node: str, step: str) -> None:
    """node and step are written into the script's text: anything but a name is refused."""
    with pytest.raises(RefusedError, match="refused -> allowed: a Slurm name"):
        slurm.task_script(
            node=node,
            step=step,
            head=["/bin/true"],
            tail=[],
            addresses={"node1": "10.0.0.1"},
            rc_file="/r/x.rc",
        )


def test_node_info_orders_like_an_allocation_and_names_unknown_nodes() -> None:
    def runner(argv: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        a = list(argv)
        if a[:3] == ["scontrol", "show", "node"]:
            if a[-1] == "ghost":
                return subprocess.CompletedProcess(a, 1, "", "Node ghost not found")
            state = "IDLE+DRAIN" if a[-1] == "node10" else "IDLE"
            reason = " Reason=maintenance [admin@now]" if a[-1] == "node10" else ""
            return subprocess.CompletedProcess(a, 0, f"NodeName={a[-1]} State={state}{reason}", "")
        if a[:3] == ["scontrol", "show", "hostlistsorted"]:
            return subprocess.CompletedProcess(a, 0, "node[2,10]\n", "")
        if a[:3] == ["scontrol", "show", "hostnames"]:
            return subprocess.CompletedProcess(a, 0, "node2\nnode10\n", "")
        raise AssertionError(a)

    info = slurm.node_info(["node10", "node2", "ghost"], runner=runner)
    assert info.order == ["node2", "node10"] and info.missing == ["ghost"]
    assert info.states["node10"] == "IDLE+DRAIN" and info.reasons["node10"].startswith(
        "maintenance"
    )


def test_natural_order_when_scontrol_cannot_sort() -> None:
    assert sorted(["node10", "node2", "gpu1"], key=slurm.natural_key) == ["gpu1", "node2", "node10"]


def test_hosts_in_order_maps_slurm_names_back_and_refuses_a_shared_name() -> None:
    assert slurm.hosts_in_order({"a.example": "a", "b.example": "b"}, ["b", "a"]) == [
        "b.example",
        "a.example",
    ]
    with pytest.raises(RefusedError, match="one Slurm node per inventory host"):
        slurm.hosts_in_order({"x": "n1", "y": "n1"}, ["n1"])


def test_jobs_from_parts_groups_one_step_by_launch() -> None:
    parts = [
        {"step": "bisect-1", "launch": "bisect-1-0", "host": "h1", "slurm_name": "n1"},
        {"step": "bisect-1", "launch": "bisect-1-1", "host": "h3", "slurm_name": "n3"},
        {"step": "bisect-1", "launch": "bisect-1-0", "host": "h2", "slurm_name": "n2"},
        {"step": "allreduce", "launch": "allreduce", "host": "h4", "slurm_name": "n4"},  # stale
    ]
    jobs = slurm.jobs_from_parts(parts, "bisect-1")
    assert jobs == [
        {"launch": "bisect-1-0", "hosts": ["h1", "h2"], "names": ["n1", "n2"]},
        {"launch": "bisect-1-1", "hosts": ["h3"], "names": ["n3"]},
    ]


# --------------------------------------------------------------------------- health


def test_a_failed_check_drains_with_a_one_line_bounded_reason() -> None:
    act = slurm.health_action(
        "node2", {"State": "IDLE"}, [("gpu_count", "7\nGPUs"), ("xid_errors", "79")]
    )
    assert act.action == "drain"
    assert act.reason == "gpufleet: gpu_count: 7 GPUs (+1 more)"
    quoted = slurm.health_action("n", {}, [("nccl_env_interfaces", "GLOO_SOCKET_IFNAME='bogus0'")])
    assert quoted.reason == "gpufleet: nccl_env_interfaces: GLOO_SOCKET_IFNAME bogus0"
    assert act.argv == (
        "scontrol",
        "update",
        "nodename=node2",
        "state=drain",
        f"reason={act.reason}",
    )
    long = slurm.health_action("n", {"State": "IDLE"}, [("x", "v" * 500)])
    assert len(long.reason) == slurm_nodes.REASON_MAX and long.reason.endswith("...")


def test_our_drain_is_resumed_once_healthy_and_kept_while_unhealthy() -> None:
    ours = {"State": "IDLE+DRAIN", "Reason": "gpufleet: gpu_count: 7 [root@2026-12-02T16:00:00]"}
    assert slurm.health_action("n", ours, []).action == "resume"
    same = slurm.health_action("n", ours, [("gpu_count", "7")])
    assert same.action == "none" and "stays drained" in same.reason
    other_fault = slurm.health_action("n", ours, [("xid_errors", "79")])
    assert other_fault.action == "drain" and other_fault.reason == "gpufleet: xid_errors: 79"


def test_someone_elses_drain_is_never_resumed_nor_overwritten() -> None:
    theirs = {"State": "IDLE+DRAIN", "Reason": "maintenance: DIMM swap [admin@2026-12-01T09:00:00]"}
    healthy = slurm.health_action("n", theirs, [])
    assert healthy.action == "none" and healthy.argv == () and "not resumed" in healthy.reason
    sick = slurm.health_action("n", theirs, [("gpu_count", "7")])
    assert sick.action == "none" and sick.argv == () and "someone else" in sick.reason


def test_a_healthy_undrained_node_is_left_alone() -> None:
    assert slurm.health_action("n", {"State": "ALLOCATED"}, []).action == "none"


def test_a_failure_not_due_yet_drains_nothing_but_keeps_gpufleets_own_drain() -> None:
    """drain_policy says not yet (fewer failed passes in a row than drain_after): an
    undrained node stays in service; a node gpufleet drained stays drained."""
    early = slurm.health_action(
        "n", {"State": "IDLE"}, [("nccl_env_interfaces", "bogus0")], due=False,
        not_yet="failed pass 1 in a row of the 2 that drain",
    )  # fmt: skip
    assert early.action == "none" and early.argv == ()
    assert early.reason == "n not drained: failed pass 1 in a row of the 2 that drain"
    ours = {"State": "IDLE+DRAIN", "Reason": "gpufleet: nccl_env_interfaces: bogus0 [root@x]"}
    kept = slurm.health_action("n", ours, [("nccl_env_interfaces", "bogus0")], due=False)
    assert kept.action == "none" and "stays drained" in kept.reason
    theirs = {"State": "MIXED+DRAIN", "Reason": "maintenance [admin@x]"}
    assert slurm.health_action("n", theirs, [("x", "y")], due=True).argv == ()


def test_drained_by_gpufleet_reads_the_state_and_the_reason() -> None:
    assert slurm.drained_by_gpufleet({"State": "IDLE+DRAIN", "Reason": "gpufleet: x: y [r@t]"})
    assert slurm.drained_by_gpufleet({"State": "ALLOCATED+DRAIN*", "Reason": "gpufleet: x [r@t]"})
    assert not slurm.drained_by_gpufleet({"State": "IDLE+DRAIN", "Reason": "maintenance [a@t]"})
    assert not slurm.drained_by_gpufleet({"State": "IDLE", "Reason": "gpufleet: old [r@t]"})
