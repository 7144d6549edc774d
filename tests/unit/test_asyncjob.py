"""gpufleet.asyncjob: the end of an async job as verify's wait printed the results file."""

from __future__ import annotations

import json

import pytest

from gpufleet.asyncjob import UNKNOWN_RC, job_result


def test_a_finished_command_gives_its_exit_status_and_output() -> None:
    text = json.dumps({"changed": True, "rc": 3, "stdout": "x", "stderr": "boom", "cmd": ["a"]})
    got = job_result(text + "\n")
    assert (got["rc"], got["finished"], got["stderr"]) == (3, 1, "boom")
    assert got["stdout_lines"] == ["x"] and got["stderr_lines"] == ["boom"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "left no result"),
        ('{"started": true, "finished": false, "ansible_job_id": "j1"}', "still running"),
        ("Traceback (most recent call last):", "not a job result"),
        ("[0]", "not a job result"),
    ],
)
def test_no_finished_result_is_an_unknown_exit(text: str, why: str) -> None:
    got = job_result(text)
    assert got["rc"] == UNKNOWN_RC and got["finished"] == 0 and why in got["msg"]


def test_a_wrapper_failure_without_rc_counts_as_failed() -> None:
    # what Ansible's async wrapper writes when the job passes its async limit
    got = job_result('{"msg": "Timeout exceeded", "failed": true, "child_pid": 42}')
    assert got["rc"] == UNKNOWN_RC and got["finished"] == 1 and got["msg"] == "Timeout exceeded"


def test_killed_by_a_signal_keeps_the_negative_status() -> None:
    assert job_result('{"rc": -9, "stdout": ""}')["rc"] == -9


def test_the_last_line_is_the_result() -> None:
    assert job_result('killed process group 7\n{"rc": 0}\n')["rc"] == 0
