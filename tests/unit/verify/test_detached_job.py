"""gpufleet.verify.detached_job and gpufleet.core.node_job: verify's detached jobs on a node. The start
and wait scripts run here for real (sh, real processes and process groups); only Ansible's
connection is replaced by a local subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from gpufleet.verify import detached_job as nodejob
from gpufleet.verify.workers.supervise import pid_alive
from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.action import node_job  # noqa: E402

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _local(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
    r = subprocess.run(cmd, check=False, shell=True, capture_output=True, text=True, timeout=60)
    return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


def _action(
    args: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    check: bool = False,
    environment: dict[str, str] | None = None,
) -> Any:
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action: Any = object.__new__(node_job.ActionModule)
    action._task = SimpleNamespace(args=args, environment=[environment] if environment else None)
    # Ansible merges and templates the play/block/task environment into this dict
    action._compute_environment_string = lambda out: out.update(environment or {})
    action._play_context = SimpleNamespace(check_mode=check)
    action._low_level_execute_command = _local
    return action.run(task_vars={"inventory_hostname": "node1"})


def _start(tmp: Path, name: str, argv: list[str], mp: pytest.MonkeyPatch) -> dict[str, Any]:
    got: dict[str, Any] = _action(
        {"state": "start", "dir": str(tmp / "jobs"), "name": name, "argv": argv}, mp
    )
    return got


def _wait(
    tmp: Path, name: str, mp: pytest.MonkeyPatch, max_wait: int = 30, pidfiles: Any = ()
) -> dict[str, Any]:
    got: dict[str, Any] = _action(
        {
            "state": "wait",
            "dir": str(tmp / "jobs"),
            "name": name,
            "max_wait": max_wait,
            "pidfiles": list(pidfiles),
        },
        mp,
    )
    return got


def _live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that still run (zombies waiting for a late-reaping
    init do not count)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_start_returns_at_once_and_wait_gives_rc_and_both_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = "sleep 1; echo out-line; echo err-line >&2; exit 3"
    t0 = time.monotonic()
    started = _start(tmp_path, "job", ["sh", "-c", script], monkeypatch)
    assert time.monotonic() - t0 < 0.9, "start waited for the job"
    assert started["changed"] is True and isinstance(started["pid"], int)
    assert abs(started["started_at"] - time.time()) < 5, "the node's clock at the start"
    assert os.getpgid(started["pid"]) == started["pid"], "the job leads its own process group"
    assert os.getsid(started["pid"]) == started["pid"], "the job has a session of its own"
    got = _wait(tmp_path, "job", monkeypatch)
    assert (got["rc"], got["finished"], got["state"], got["msg"]) == (3, 1, "done", "")
    assert got["stdout_lines"] == ["out-line"] and got["stderr_lines"] == ["err-line"]
    assert got["killed"] == [] and got["changed"] is False
    assert got["failed"] is False, "the job's rc is the caller's verdict, not the task's"


def test_the_wait_marks_that_it_began_while_the_job_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job sees <name>.waited appear once the controller's wait began (the pre-check mesh
    reads it as "every node was started"): here the job itself waits for it, so a wait that
    made no mark would end by its limit with the job stopped, not with the job's rc."""
    marker = tmp_path / "jobs" / "seen.waited"
    script = f"i=0; while [ ! -e {marker} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; [ -e {marker} ]"
    _start(tmp_path, "seen", ["sh", "-c", script], monkeypatch)
    assert not marker.exists(), "the start made the mark: only the wait may"
    got = _wait(tmp_path, "seen", monkeypatch, max_wait=10)
    assert (got["rc"], got["state"]) == (0, "done"), got


def test_a_start_with_a_ready_file_returns_once_the_job_made_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pre-check mesh binds its listeners, then creates its ready file: the start returns
    only then (here 1 s after the job began), so the next task finds every node listening."""
    ready = tmp_path / "listening"
    t0 = time.monotonic()
    got = _action(
        {"state": "start", "dir": str(tmp_path / "jobs"), "name": "mesh",
         "argv": ["sh", "-c", f"sleep 1; touch {ready}; sleep 5"],
         "ready_file": str(ready), "ready_wait": 20},
        monkeypatch,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert got["ready"] is True and 0.9 <= took < 5, (got, took)
    assert _wait(tmp_path, "mesh", monkeypatch, max_wait=1)["state"] == "timeout"


def test_a_start_whose_job_never_gets_ready_returns_by_its_bound_or_the_job_s_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that ends without its ready file (a port it could not bind) does not hold the
    start; one that neither ends nor gets ready holds it ready_wait seconds, then says so."""
    base = {"state": "start", "dir": str(tmp_path / "jobs"), "ready_file": str(tmp_path / "r")}
    t0 = time.monotonic()
    ended = _action({**base, "name": "ends", "argv": ["sh", "-c", "exit 3"]}, monkeypatch)
    assert ended["ready"] is False and time.monotonic() - t0 < 5, ended
    t0 = time.monotonic()
    stuck = _action(
        {**base, "name": "stuck", "argv": ["sleep", "30"], "ready_wait": 1}, monkeypatch
    )
    assert stuck["ready"] is False and 0.9 <= time.monotonic() - t0 < 5, stuck
    _wait(tmp_path, "stuck", monkeypatch, max_wait=1)
    with pytest.raises(AnsibleActionFail, match="ready_wait must be > 0"):
        _action({**base, "name": "bad", "argv": ["true"], "ready_wait": -1}, monkeypatch)


def test_the_job_reads_nothing_from_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(tmp_path, "stdin", ["sh", "-c", "cat; echo eof"], monkeypatch)
    got = _wait(tmp_path, "stdin", monkeypatch, max_wait=10)
    assert (got["rc"], got["stdout"]) == (0, "eof\n")


def test_what_the_job_leaves_in_its_group_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the child ignores nothing: SIGTERM ends it; its PID is printed for the check below
    started = _start(tmp_path, "leaky", ["sh", "-c", "sleep 60 & echo $!"], monkeypatch)
    got = _wait(tmp_path, "leaky", monkeypatch)
    assert got["rc"] == 0 and got["killed"] == [started["pid"]] and got["changed"] is True
    assert _gone(int(got["stdout"].strip())), "the job's leftover child still runs"


def test_the_groups_the_pid_files_name_are_stopped_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As torchrun's group, which gpufleet.verify.workers.supervise records: a group of its own."""
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    reaper = threading.Thread(target=other.wait, daemon=True)  # as its parent would
    reaper.start()
    pidfile = tmp_path / "torchrun.pid"
    pidfile.write_text(f"{other.pid}\n")
    try:
        _start(tmp_path, "sup", ["true"], monkeypatch)
        got = _wait(tmp_path, "sup", monkeypatch, pidfiles=[pidfile, tmp_path / "missing.pid"])
        assert got["rc"] == 0 and other.pid in got["killed"]
        reaper.join(timeout=5)
        assert other.returncode == -signal.SIGTERM
    finally:
        if other.poll() is None:
            other.kill()


def test_a_job_past_its_wait_limit_is_stopped_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _start(tmp_path, "slow", ["sleep", "60"], monkeypatch)
    t0 = time.monotonic()
    got = _wait(tmp_path, "slow", monkeypatch, max_wait=1)
    assert time.monotonic() - t0 < 8
    assert (got["rc"], got["finished"], got["state"]) == (-1, 0, "timeout")
    assert "did not end within its wait limit" in got["msg"]
    assert started["pid"] in got["killed"]
    assert _live_members(started["pid"]) == []


def test_a_job_killed_from_outside_is_lost_not_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _start(tmp_path, "victim", ["sleep", "60"], monkeypatch)
    os.killpg(started["pid"], signal.SIGKILL)
    assert _gone(started["pid"])
    got = _wait(tmp_path, "victim", monkeypatch)
    assert (got["rc"], got["finished"], got["state"]) == (-1, 0, "lost")
    assert "without an exit status" in got["msg"]


def test_the_job_gets_the_task_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's play sets GPUFLEET_RUN_ID: every result file a job writes carries it."""
    env = {"GPUFLEET_RUN_ID": "run-1 x'y", "OTHER": ""}
    argv = ["sh", "-c", 'printf "%s|%s" "$GPUFLEET_RUN_ID" "${OTHER-unset}"']
    args = {"state": "start", "dir": str(tmp_path / "jobs"), "name": "env", "argv": argv}
    _action(args, monkeypatch, environment=env)
    assert _wait(tmp_path, "env", monkeypatch)["stdout"] == "run-1 x'y|"
    with pytest.raises(AnsibleActionFail, match="not an environment variable name"):
        _action({**args, "name": "env2"}, monkeypatch, environment={"A=B": "1"})


def test_a_missing_command_is_its_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _start(tmp_path, "nocmd", ["/nonexistent/torchrun"], monkeypatch)
    got = _wait(tmp_path, "nocmd", monkeypatch)
    assert got["rc"] == 127 and "nonexistent" in got["stderr"]


def test_a_name_is_started_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _start(tmp_path, "once", ["true"], monkeypatch)
    with pytest.raises(AnsibleActionFail, match=r"node1: cannot start the job once.*already"):
        _start(tmp_path, "once", ["true"], monkeypatch)


def test_output_comes_back_bounded_to_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = nodejob.OUTPUT_LIMIT + 5000
    prog = f"import sys; sys.stdout.write('x' * {big} + 'END')"
    _start(tmp_path, "big", [sys.executable, "-c", prog], monkeypatch)
    got = _wait(tmp_path, "big", monkeypatch)
    assert len(got["stdout"]) == nodejob.OUTPUT_LIMIT and got["stdout"].endswith("END")


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"state": "start", "dir": "/tmp/x", "name": "a"}, "argv, a non-empty list"),
        ({"state": "start", "dir": "/tmp/x", "name": "../a", "argv": ["true"]}, "plain file name"),
        ({"state": "wait", "dir": "/tmp/x", "name": "a"}, "max_wait > 0"),
        ({"state": "wait", "dir": "/tmp/x", "name": "a", "max_wait": "soon"}, "integer"),
        ({"state": "stop", "dir": "/tmp/x", "name": "a"}, "start or wait"),
        ({"state": "wait", "name": "a"}, "needs dir"),
    ],
)
def test_bad_arguments_are_refused_before_the_node_is_asked(
    args: dict[str, Any], match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AnsibleActionFail, match=match):
        _action(args, monkeypatch)


def test_check_mode_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = _action(
        {"state": "start", "dir": str(tmp_path), "name": "a", "argv": ["touch", "x"]},
        monkeypatch,
        check=True,
    )
    assert got["skipped"] is True and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "rc", "state", "msg"),
    [
        ("state done\nrc 0\nout aGk=\n", 0, "done", ""),
        ("state never-started\n", -1, "never-started", "did not start"),
        ("state done\n", -1, "done", "left no exit status"),
        ("state done\nrc banana\n", -1, "done", "left no exit status"),
        ("", -1, "unknown", "printed no result: nothing"),
        ("Traceback ...\n", -1, "unknown", "printed no result: Traceback"),
    ],
)
def test_parse_wait_never_invents_an_exit_status(text: str, rc: int, state: str, msg: str) -> None:
    got = nodejob.parse_wait(text)
    assert (got["rc"], got["state"]) == (rc, state)
    assert msg in got["msg"] if msg else got["msg"] == ""
    assert got["finished"] == (1 if rc != -1 else 0)


def test_parse_wait_ignores_undecodable_streams() -> None:
    got = nodejob.parse_wait("state done\nrc 1\nout !!!notbase64\nerr ZXJy\n")
    assert (got["rc"], got["stdout"], got["stderr"]) == (1, "", "err")


@pytest.mark.slow
def test_a_job_that_never_recorded_its_pid_is_named_after_10s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # slow: the wait gives a start 10 s to record its PID
    (tmp_path / "jobs").mkdir()
    got = _wait(tmp_path, "ghost", monkeypatch)
    assert (got["rc"], got["state"]) == (-1, "never-started")
    assert "did not start" in got["msg"]


@pytest.mark.parametrize(
    ("stdout", "at"),
    [("started 12\nat 1765100000\n", 1765100000), ("started 12\n", None), ("at 17651.5\n", None),
     ("at \n", None), ("", None)],
)  # fmt: skip
def test_started_at_is_the_nodes_clock_or_none(stdout: str, at: int | None) -> None:
    """A node whose date printed no whole seconds leaves no start time: verify then counts
    no spread for it, never a made-up one."""
    assert nodejob.started_at(stdout) == at
