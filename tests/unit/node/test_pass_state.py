"""gpufleet.node.pass_state: the count of failed passes and the last judgement, kept in a file
across passes under a lock."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from gpufleet.node import pass_state
from gpufleet.node.pass_state import PassState
from gpufleet.results import Record

HEALTHY = [Record("gpu_count", "pass"), Record("xid_errors", "warn")]
FAILED = [Record("nccl_env_interfaces", "fail"), Record("xid_errors", "incomplete")]
INCOMPLETE = [Record("gpu_count", "pass"), Record("health_timeout", "incomplete")]


def test_outcome_of_a_pass() -> None:
    assert pass_state.outcome(HEALTHY) == "healthy"
    assert pass_state.outcome(FAILED) == "failed"  # a failure beside an incomplete check
    assert pass_state.outcome(INCOMPLETE) == "incomplete"
    assert pass_state.outcome([]) == "healthy"


def test_failures_count_up_incomplete_passes_hold_and_a_healthy_pass_resets() -> None:
    s = PassState()
    trail = []
    for t, records in enumerate([FAILED, INCOMPLETE, FAILED, FAILED, HEALTHY, FAILED]):
        s = pass_state.advance(s, records, 1000.0 + t, 60.0)
        trail.append((s.failed_passes, s.last_outcome))
    assert trail == [
        (1, "failed"), (1, "incomplete"), (2, "failed"), (3, "failed"), (0, "healthy"),
        (1, "failed"),
    ]  # fmt: skip


def test_only_a_judged_pass_renews_the_verdict_and_its_validity() -> None:
    s = pass_state.advance(PassState(), HEALTHY, 1000.0, 900.0)
    assert (s.last_run, s.last_success, s.valid_until) == (1000.0, 1000.0, 1900.0)
    s = pass_state.advance(s, INCOMPLETE, 1300.0, 900.0)
    assert (s.last_run, s.last_success, s.valid_until) == (1300.0, 1000.0, 1900.0)
    s = pass_state.advance(s, FAILED, 1600.0, 900.0)
    assert (s.last_run, s.last_success, s.valid_until) == (1600.0, 1600.0, 2500.0)


def test_the_slurm_answer_is_kept_across_passes() -> None:
    s = pass_state.advance(PassState(drained=True), INCOMPLETE, 1.0, 1.0)
    assert s.drained is True
    assert pass_state.advance(PassState(), HEALTHY, 1.0, 1.0).drained is None


def test_saved_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "health-state.json"
    want = PassState(3, "failed", 10.0, 10.0, 100.0, True)
    pass_state.save(path, want)
    assert pass_state.load(path) == (want, "")
    assert json.loads(path.read_text())["schema"] == pass_state.SCHEMA


def test_a_missing_file_starts_fresh_without_a_word(tmp_path: Path) -> None:
    assert pass_state.load(tmp_path / "none.json") == (PassState(), "")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"schema": 1, "failed_pa', "unreadable"),
        ('{"schema": 2, "failed_passes": 1}', "schema 1"),
        ('{"schema": 1, "failed_passes": -1}', "not a count"),
        ('{"schema": 1, "failed_passes": true}', "not a count"),
        ('{"schema": 1, "failed_passes": 1, "last_run": "yesterday"}', "not a Unix time"),
        ("[]", "schema 1"),
    ],
)
def test_a_broken_file_starts_the_count_over_and_says_so(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "health-state.json"
    path.write_text(text)
    state, note = pass_state.load(path)
    assert state == PassState()
    assert str(path) in note and why in note and "starts over" in note


def test_a_second_pass_waits_for_the_lock_and_gives_up_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "health-state.json"
    held = threading.Event()
    release = threading.Event()

    def first() -> None:
        with pass_state.locked(path):
            held.set()
            release.wait(5)

    t = threading.Thread(target=first)
    t.start()
    try:
        assert held.wait(5)
        start = time.monotonic()
        with (
            pytest.raises(pass_state.PassStateError, match=r"health-state\.json\.lock"),
            pass_state.locked(path, wait_s=0.3),
        ):
            pass
        assert time.monotonic() - start >= 0.3
    finally:
        release.set()
        t.join()
    with pass_state.locked(path, wait_s=0.3):  # free again once the first pass is done
        pass


def test_a_lock_that_cannot_be_opened_names_the_file_and_the_fix(tmp_path: Path) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    with (
        pytest.raises(pass_state.PassStateError, match=r"cannot open .*--state FILE"),
        pass_state.locked(blocked / "health-state.json"),
    ):
        pass
