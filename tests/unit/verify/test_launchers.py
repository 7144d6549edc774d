"""gpufleet.verify.launchers: the launcher seam. The registry is the one list of launchers
(the CLI, the Makefile and the argument spec follow it; every launcher has its task files
and nothing else in the role branches on gpufleet_launcher); each launcher's commands start,
wait for with a bound, collect and cancel a step, the ssh ones run here for real."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from ansible.plugins.action import ActionBase

from gpufleet.cli import build_parser
from gpufleet.errors import RefusedError
from gpufleet.verify import detached_job
from gpufleet.verify import launchers as launchers_package
from gpufleet.verify.launchers import base, registry, slurm, ssh
from gpufleet.verify.workers.supervise import pid_alive
from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.action import node_job  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "roles" / "verify" / "tasks"
#: task files of the role that are not a launcher's own
SHARED_LAUNCH_FILES = {"launch.yml", "launch_kill.yml"}


def _spec_choices(role: str) -> list[str] | None:
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(path.read_text())["argument_specs"]
    for entry in specs.values():
        option = (entry.get("options") or {}).get("gpufleet_launcher")
        if option is not None:
            return list(option["choices"])
    return None


# --------------------------------------------------------------------------- the registry


def test_the_argument_specs_allow_exactly_the_registered_launchers() -> None:
    declared = {role: _spec_choices(role) for role in ("gpufleet_common", "verify")}
    found = {role: choices for role, choices in declared.items() if choices is not None}
    assert found, "no argument spec declares gpufleet_launcher"
    for role, choices in found.items():
        assert sorted(choices) == sorted(registry.names()), (
            f"roles/{role}/meta/argument_specs.yml: gpufleet_launcher choices {choices} != "
            f"the registry's {list(registry.names())}"
        )
    default = yaml.safe_load((REPO / "roles/gpufleet_common/defaults/main.yml").read_text())
    assert default["gpufleet_launcher"] == registry.DEFAULT == registry.names()[0]


@pytest.mark.parametrize("name", registry.names())
def test_every_launcher_has_its_task_files(name: str) -> None:
    launcher = registry.get(name)
    assert launcher.name == name and launcher.description
    missing = [f for f in launcher.task_files() if not (TASKS / f).is_file()]
    assert not missing, f"launcher {name}: no roles/verify/tasks/{missing}"


def test_no_task_file_of_a_launcher_that_is_not_registered() -> None:
    owned = {f for name in registry.names() for f in registry.get(name).task_files()}
    launchers = {p.name for p in TASKS.glob("launch_*.yml")} - SHARED_LAUNCH_FILES
    assert launchers - owned == set(), "launch_<name>.yml files of no registered launcher"


def test_the_role_reaches_the_launcher_only_through_its_files() -> None:
    own = {f for name in registry.names() for f in registry.get(name).task_files()}
    branching = re.compile(r"gpufleet_launcher\s*(==|!=|\bin\b)")
    hits = [
        f"{p.relative_to(REPO)}:{n}"
        for p in [*(REPO / "roles" / "verify").rglob("*.yml"), *(REPO / "playbooks").glob("*.yml")]
        if p.name not in own
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if branching.search(line)
    ]
    assert not hits, hits
    assert (
        'include_tasks: "launch_{{ gpufleet_launcher }}.yml"' in (TASKS / "launch.yml").read_text()
    )
    assert (
        'include_tasks: "launch_{{ gpufleet_launcher }}_prepare.yml"'
        in (TASKS / "prepare.yml").read_text()
    )


def test_an_unknown_launcher_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(
        RefusedError, match=r"gpufleet_launcher='pbs' is refused -> allowed: ssh, slurm"
    ):
        registry.get("pbs")


def test_the_registry_takes_each_module_launcher_and_refuses_one_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert registry.discover() == registry.LAUNCHERS
    assert list(registry.LAUNCHERS) == ["ssh", "slurm"]
    (tmp_path / "pbs.py").write_text("LAUNCHER = None\n")
    monkeypatch.setattr(launchers_package, "__path__", [*launchers_package.__path__, str(tmp_path)])
    with pytest.raises(TypeError, match=r"gpufleet\.verify\.launchers\.pbs holds no LAUNCHER"):
        registry.discover()
    sys.modules.pop("gpufleet.verify.launchers.pbs", None)


def test_the_names_entry_prints_one_per_line_default_first() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gpufleet.verify.launchers.registry"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "ssh\nslurm\n", "")
    assert registry.main(["--all"]) == 2


def test_the_cli_launcher_choices_are_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    assert parser.parse_args(["verify", "--launcher", "slurm"]).launcher == "slurm"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["verify", "--launcher", "pbs"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--launcher: invalid choice" in err
    assert all(name in err.split("invalid choice", 1)[1] for name in registry.names())


# --------------------------------------------------------------------------- the step


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "a/b"}, "a plain file name"),
        ({"argv": ()}, "no command to launch"),
        ({"timeout_s": 0}, "timeout_s must be > 0"),
        ({"start_timeout_s": -1}, "start_timeout_s >= 0"),
    ],
)
def test_a_step_that_cannot_run_is_refused(fields: dict[str, Any], message: str) -> None:
    good: dict[str, Any] = {"name": "allreduce", "argv": ("true",), "timeout_s": 300}
    with pytest.raises(ValueError, match=message):
        base.Step(**{**good, **fields})


# --------------------------------------------------------------------------- ssh


def _ssh_step(run_dir: Path, argv: tuple[str, ...], timeout_s: float = 20) -> base.Step:
    return base.Step(name="allreduce", argv=argv, timeout_s=timeout_s, run_dir=str(run_dir))


def test_ssh_bounds_follow_the_step_timeout(tmp_path: Path) -> None:
    step = _ssh_step(tmp_path, ("torchrun",), timeout_s=300)
    start, wait, cancel = (
        ssh.LAUNCHER.start(step),
        ssh.LAUNCHER.wait(step),
        ssh.LAUNCHER.cancel(step),
    )
    assert start.argv[-1] == "torchrun" and start.bound_s == 10
    # launch_ssh.yml: max_wait verify_launch_timeout + 30, the task's timeout + 60
    assert wait.argv[-2:] == ("330", f"{tmp_path}/allreduce.pid") and wait.bound_s == 360
    assert cancel.argv[-2:] == (f"{tmp_path}/.jobs/allreduce.pid", f"{tmp_path}/allreduce.pid")
    with pytest.raises(ValueError, match="needs the node's run directory"):
        ssh.LAUNCHER.start(base.Step(name="x", argv=("true",), timeout_s=1))


def _capture_node_job(args: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    sent: list[str] = []
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action: Any = object.__new__(node_job.ActionModule)
    action._task = SimpleNamespace(args=args, environment=None)
    action._play_context = SimpleNamespace(check_mode=False)

    def execute(cmd: str, sudoable: bool = True, **_: Any) -> dict[str, Any]:
        sent.append(cmd)
        return {"rc": 0, "stdout": "started 42\nstate done\nrc 0\n", "stderr": ""}

    action._low_level_execute_command = execute
    action.run(task_vars={"inventory_hostname": "node1"})
    return sent[0]


def test_ssh_commands_are_the_ones_the_node_job_action_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step = _ssh_step(tmp_path, ("python", "-m", "torch.distributed.run"), timeout_s=300)
    jobs = f"{tmp_path}/.jobs"
    start = {"state": "start", "dir": jobs, "name": "allreduce", "argv": list(step.argv)}
    assert _capture_node_job(start, monkeypatch) == shlex.join(ssh.LAUNCHER.start(step).argv)
    pidfile = f"{tmp_path}/allreduce.pid"
    wait = {
        "state": "wait",
        "dir": jobs,
        "name": "allreduce",
        "max_wait": 330,
        "pidfiles": [pidfile],
    }
    assert _capture_node_job(wait, monkeypatch) == shlex.join(ssh.LAUNCHER.wait(step).argv)


def _run(command: base.Command) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(command.argv), capture_output=True, text=True, check=False, timeout=command.bound_s
    )


def test_ssh_start_wait_collect_for_real(tmp_path: Path) -> None:
    step = _ssh_step(tmp_path, ("sh", "-c", "echo rank-out; exit 3"))
    started = _run(ssh.LAUNCHER.start(step))
    assert started.returncode == 0 and started.stdout.startswith("started "), started.stderr
    waited = _run(ssh.LAUNCHER.wait(step))
    outcome = ssh.LAUNCHER.collect(step, waited.stdout)
    assert outcome == base.Outcome(rc=3, state="done", msg="") and not outcome.ok


def test_ssh_cancel_stops_the_steps_groups_for_real(tmp_path: Path) -> None:
    step = _ssh_step(tmp_path, ("sh", "-c", "sleep 60"))
    started = _run(ssh.LAUNCHER.start(step))
    pid = int(started.stdout.split()[1])
    assert pid_alive(pid)
    cancelled = _run(ssh.LAUNCHER.cancel(step))
    assert cancelled.returncode == 0 and f"killed {pid}" in cancelled.stdout
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)
    # nothing left: a second cancel stops nothing and still succeeds
    again = _run(ssh.LAUNCHER.cancel(step))
    assert (again.returncode, again.stdout) == (0, "")
    # the job's own shell went with its group: no exit status, and the wait says so
    outcome = ssh.LAUNCHER.collect(step, _run(ssh.LAUNCHER.wait(step)).stdout)
    assert (outcome.rc, outcome.state) == (detached_job.UNKNOWN_RC, "lost") and outcome.msg


def test_ssh_report_uses_the_inventory_names() -> None:
    assert ssh.LAUNCHER.report_names({"node1.example": "n1"}) == {}


# --------------------------------------------------------------------------- slurm


def _slurm_step(**over: Any) -> base.Step:
    fields: dict[str, Any] = {
        "name": "allreduce",
        "argv": ("/bin/bash", "/var/lib/gpufleet/verify/R/allreduce.slurm"),
        "timeout_s": 300,
        "nodes": ("node1", "node2"),
        "start_timeout_s": 120,
        "output": "/var/lib/gpufleet/verify/R/slurm-allreduce-%j.out",
    }
    return base.Step(**{**fields, **over})


def test_slurm_start_is_sbatch_of_one_task_per_node() -> None:
    launcher = slurm.SlurmLauncher(options=slurm.JobOptions(partition="gpu", gres="gpu:8"))
    start = launcher.start(_slurm_step())
    assert start.argv[:3] == ("sbatch", "--parsable", "--job-name=gpufleet-allreduce")
    # the job's own limit: the step's timeout plus a minute, in minutes
    assert {"--nodelist=node1,node2", "--time=6", "--partition=gpu", "--gres=gpu:8"} <= set(
        start.argv
    )
    assert (
        start.stdin is not None and "srun --nodes=2 --ntasks=2 --ntasks-per-node=1" in start.stdin
    )
    assert start.stdin.rstrip().endswith("/bin/bash /var/lib/gpufleet/verify/R/allreduce.slurm")
    assert start.bound_s == slurm.COMMAND_BOUND_S
    with pytest.raises(ValueError, match="needs the job's output path"):
        launcher.start(_slurm_step(output=""))
    with pytest.raises(RefusedError, match="node list"):
        launcher.start(_slurm_step(nodes=("node1;reboot",)))


def test_slurm_wait_is_bounded_by_start_and_run_limits_and_cancel_is_scancel() -> None:
    step = _slurm_step()
    wait = slurm.LAUNCHER.wait(step, "4242")
    # launch_slurm.yml: async verify_launch_timeout + verify_slurm_start_timeout + 120
    assert wait.argv == ("scontrol", "show", "job", "-o", "4242") and wait.bound_s == 540
    assert slurm.LAUNCHER.cancel(step, "4242").argv == ("scancel", "4242")
    for bad in ("", "42;rm", "-1"):
        with pytest.raises(ValueError, match="a Slurm job id is digits"):
            slurm.LAUNCHER.cancel(step, bad)


@pytest.mark.parametrize(
    ("rc_file", "rc", "state"),
    [
        ("0\n", 0, "done"),
        ("97", 97, "done"),
        ("", -1, "no-exit-status"),
        ("x", -1, "no-exit-status"),
    ],
)
def test_slurm_collect_reads_the_nodes_rc_file(rc_file: str, rc: int, state: str) -> None:
    outcome = slurm.LAUNCHER.collect(_slurm_step(), rc_file)
    assert (outcome.rc, outcome.state) == (rc, state)
    assert outcome.ok is (rc == 0)
    assert ("cancelled while pending" in outcome.msg) is (state != "done")


def test_slurm_report_names_are_the_configured_or_short_names() -> None:
    hosts = {"node1.example.org": "", "gpu-b": "slurm-b"}
    assert slurm.LAUNCHER.report_names(hosts) == {"node1.example.org": "node1", "gpu-b": "slurm-b"}


def test_describe_gives_one_line_per_launcher() -> None:
    lines = base.describe(registry.LAUNCHERS.values())
    assert [line.split(":")[0] for line in lines] == ["ssh", "slurm"]
    assert all("\n" not in line for line in lines)
