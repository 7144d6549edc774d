"""Issue 17 item 2: run ids are unique, validated as data, claimed once; verify is locked."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.verify import run_id as runid
from local_nodes import write_inventory

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "good", ["20261202T010203Z-a1b2c3", "fault-rank-killed-20261202T0102", "r1", "A.b_c-9"]
)
def test_valid_ids_pass(good: str) -> None:
    assert runid.validate(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "latest",
        "LATEST",
        "../etc",
        "a/b",
        ".hidden",
        "-rf",
        "x`touch /tmp/pwn`",
        "$(id)",
        "a b",
        "ok\n",
        "a" * 65,
        "run;reboot",
    ],
)
def test_invalid_ids_are_refused(bad: str) -> None:
    with pytest.raises(runid.RunIdError):
        runid.validate(bad)


def test_new_ids_differ_within_one_second() -> None:
    t = datetime.datetime(2026, 12, 2, 1, 2, 3, tzinfo=datetime.UTC)
    ids = {runid.new_run_id(t) for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("20261202T010203Z-") for i in ids)
    assert all(runid.validate(i) for i in ids)


def test_claim_creates_once_and_refuses_reuse(tmp_path: Path) -> None:
    assert runid.claim(tmp_path, "r1") == "r1"
    assert (tmp_path / "r1").is_dir()
    with pytest.raises(runid.RunIdError, match="already exists"):
        runid.claim(tmp_path, "r1")
    a, b = runid.claim(tmp_path), runid.claim(tmp_path)
    assert a != b and (tmp_path / a).is_dir() and (tmp_path / b).is_dir()


def test_cli_exit_2_and_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runid", "--reports", str(tmp_path), "--", "latest"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: RUN_ID 'latest' is reserved") and err.count("\n") == 1
    assert main(["runid", "--reports", str(tmp_path), "--", "ok-1"]) == 0
    assert capsys.readouterr().out.strip() == "ok-1"
    assert main(["runid", "--reports", str(tmp_path), "--", ""]) == 0
    fresh = capsys.readouterr().out.strip()
    assert runid.validate(fresh) == fresh and (tmp_path / fresh).is_dir()


def test_cli_bad_argument_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["runid", "one-id", "extra-id"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: gpufleet") and "extra-id" in err and err.count("\n") == 1


def _make_verify(
    tmp_path: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(REPO),
            "verify",
            f"INVENTORY={tmp_path}/none",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )


def test_make_verify_never_executes_run_id(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for evil in (f"x`touch {marker}`", f"x$$(touch {marker})", f"x;touch {marker}"):
        r = _make_verify(tmp_path, f"RUN_ID={evil}")
        assert r.returncode != 0
        assert "is not allowed" in r.stderr, r.stdout + r.stderr
        assert not marker.exists(), f"RUN_ID {evil!r} ran a command"


def test_make_verify_waits_then_refuses_while_locked(tmp_path: Path) -> None:
    # the local nodes' inventory keeps its reports in <tmp>/rep (verify_report_dir): make
    # verify is given the same folder (REPORT_DIR), which holds its lock too
    reports = tmp_path / "rep"
    reports.mkdir()
    holder = subprocess.Popen(
        ["flock", str(reports / ".verify.lock"), "sleep", "30"], start_new_session=True
    )
    # input the check play accepts (the local nodes' inventory) waits for the lock; input it
    # refuses (no inventory there) is refused at once, however long the wait would be
    inventory = write_inventory(tmp_path)
    try:
        time.sleep(1)  # let flock take the lock first
        r = _make_verify(tmp_path, "VERIFY_LOCK_WAIT=1", "RUN_ID=lock-test-never-claimed",
                         f"INVENTORY={inventory}", f"REPORT_DIR={reports}")  # fmt: skip
        t0 = time.monotonic()
        bad = _make_verify(tmp_path, "VERIFY_LOCK_WAIT=600", "RUN_ID=lock-test-never-claimed",
                           f"REPORT_DIR={reports}")  # fmt: skip
        bad_s = time.monotonic() - t0
    finally:
        holder.kill()
        holder.wait()
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "waiting up to 1s" in out and "refused: another make verify" in out, out
    assert not (reports / "lock-test-never-claimed").exists()
    said = bad.stdout + bad.stderr
    assert bad.returncode != 0 and bad_s < 25, (bad_s, said)
    assert "gpu_nodes=[]" in said and "waiting up to" not in said, said
