"""gpufleet.verify.verify_run (gpufleet verify, behind make verify): lock, run id, exit code 0/1/2.

A stand-in ansible-playbook plays the three outcomes: the check play refuses (it never
prints the verify play), the run fails (a summary with status fail), the run passes."""

from __future__ import annotations

import fcntl
import io
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpufleet.errors import RefusedError
from gpufleet.verify import verify_run as verifyrun

FAKE = """#!{python}
import json, os, sys
args = sys.argv[1:]
mode = os.environ["FAKE_MODE"]
if args[0].endswith("check_inventory.yml"):  # the check play alone (a busy lock)
    open(os.environ["FAKE_ARGV"] + ".check", "w").write(json.dumps(args))
    print("PLAY [Check the inventory and every node's variables] ***")
    if mode == "refuse":
        print("fatal: [n1]: FAILED! => gpu_nodes=[] is refused")
        sys.exit(2)
    sys.exit(0)
given = {{}}
for i, a in enumerate(args[:-1]):
    if a == "-e" and args[i + 1].startswith("{{"):
        given.update(json.loads(args[i + 1]))
run_id = given["verify_run_id"]
open(os.environ["FAKE_ARGV"], "w").write(json.dumps(args))
if mode == "refuse":
    print("PLAY [Check the inventory and every node's variables] ***")
    print("fatal: [n1]: FAILED! => verify_iters=0 is refused")
    sys.exit(2)
print("PLAY [Verify the GPU nodes] ***")
if mode == "crash":
    sys.exit(2)
out = os.path.join(given["__verify_report_dir_cli"], run_id)
json.dump({{"status": mode}}, open(os.path.join(out, "summary.json"), "w"))
sys.exit(0 if mode == "pass" else 2)
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "verify.yml").write_text("---\n")
    (tmp_path / "roles" / "verify").mkdir(parents=True)
    fake = tmp_path / "ansible-playbook"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def _run(repo: Path, mode: str, monkeypatch: pytest.MonkeyPatch, **kw: object) -> verifyrun.Outcome:
    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setenv("FAKE_ARGV", str(repo / "argv.json"))
    monkeypatch.chdir(repo)
    return verifyrun.run(
        repo,
        "inv",
        ansible_playbook=str(repo / "ansible-playbook"),
        say=io.StringIO(),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(("mode", "code", "status"), [("pass", 0, "pass"), ("fail", 1, "fail"),
                                                       ("crash", 1, "no-report"), ("refuse", 2, "refused")])  # fmt: skip
def test_exit_code_says_pass_failure_or_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch, mode: str, code: int, status: str
) -> None:
    out = _run(repo, mode, monkeypatch, requested_id="r-" + mode)
    assert (out.exit_code, out.status, out.run_id) == (code, status, "r-" + mode)
    # a refused run leaves no claimed folder behind; the others keep theirs
    assert (repo / "reports" / out.run_id).is_dir() == (mode != "refuse")


def test_arguments_are_data(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evil = ["-e", "x=`touch pwned`", "--limit", "$(touch pwned2)"]
    _run(repo, "pass", monkeypatch, extra=evil)
    argv = json.loads((repo / "argv.json").read_text())
    assert argv[-4:] == evil and argv[1:3] == ["-i", "inv"]
    assert not (repo / "pwned").exists() and not (repo / "pwned2").exists()


def test_a_bad_run_id_is_refused_before_anything_runs(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RefusedError, match="RUN_ID 'latest' is reserved"):
        _run(repo, "pass", monkeypatch, requested_id="latest")
    assert not (repo / "argv.json").exists()


def test_a_held_lock_is_waited_for_then_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "reports").mkdir()
    with (repo / "reports" / ".verify.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(verifyrun.LockBusy, match=r"after 0\.2s"):
            _run(repo, "pass", monkeypatch, lock_wait=0.2)
    assert not (repo / "argv.json").exists()
    assert (repo / "argv.json.check").is_file()  # the input was checked before the wait
    (repo / "argv.json.check").unlink()
    assert _run(repo, "pass", monkeypatch).exit_code == 0  # free again
    assert not (repo / "argv.json.check").exists()  # a free lock: verify.yml checks, once


def test_find_repo_from_a_subdirectory(repo: Path) -> None:
    (repo / "docs").mkdir()
    assert verifyrun.find_repo(repo / "docs") == repo
    with pytest.raises(RefusedError, match="not inside a gpufleet checkout"):
        verifyrun.find_repo(Path("/"))
    assert os.path.isabs(str(verifyrun.find_repo(repo)))


def test_a_bad_run_id_is_refused_at_once_while_another_run_holds_the_lock(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A RUN_ID that can never be used is refused without waiting for another make verify's
    lock (before: 'a b' sat out the whole VERIFY_LOCK_WAIT, 900 s, then was refused)."""
    (repo / "reports").mkdir()
    with (repo / "reports" / ".verify.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RefusedError, match="RUN_ID 'a b'"):
            _run(repo, "pass", monkeypatch, requested_id="a b", lock_wait=30)
    assert not (repo / "argv.json").exists()


def test_bad_input_is_refused_at_once_while_another_run_holds_the_lock(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy lock runs the check play alone first: an inventory or a variable it refuses ends
    the run at once (exit 2), with the play's own message, not after VERIFY_LOCK_WAIT (before:
    INVENTORY='/nonexistent; touch x' waited 900 s behind a soak's make verify)."""
    (repo / "reports").mkdir()
    say = io.StringIO()
    monkeypatch.setenv("FAKE_MODE", "refuse")
    monkeypatch.setenv("FAKE_ARGV", str(repo / "argv.json"))
    monkeypatch.chdir(repo)
    with (repo / "reports" / ".verify.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(verifyrun.InputRefused) as refused:
            verifyrun.run(repo, "inv", extra=["-e", "x=1"], lock_wait=60,
                          ansible_playbook=str(repo / "ansible-playbook"), say=say)  # fmt: skip
    assert refused.value.exit_code == 2
    assert "gpu_nodes=[] is refused" in say.getvalue()
    assert not (repo / "argv.json").exists()  # verify.yml never ran
    check = json.loads((repo / "argv.json.check").read_text())
    where = json.dumps({verifyrun.REPORT_DIR_VAR: str(repo / "reports")})
    assert check[1:] == ["-i", "inv", "-e", '{"gpufleet_check_roles": ["verify"]}',
                         "-e", where, "-e", "x=1"]  # fmt: skip


def test_a_report_dir_holds_the_lock_the_run_id_and_the_report(
    repo: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """REPORT_DIR (gpufleet verify --report-dir): the playbook is told the folder, and the lock,
    the claimed run folder and the verdict are read there, not in <repo>/reports (before: a
    verify_report_dir outside reports/ passed, and make verify said "no report", exit 1)."""
    elsewhere = tmp_path / "site-reports"
    out = _run(repo, "pass", monkeypatch, requested_id="r1", report_dir=elsewhere)
    assert (out.exit_code, out.status) == (0, "pass")
    assert out.summary == elsewhere / "r1" / "summary.json" and out.summary.is_file()
    assert (elsewhere / ".verify.lock").is_file() and not (repo / "reports").exists()
    argv = json.loads((repo / "argv.json").read_text())
    assert json.dumps({verifyrun.REPORT_DIR_VAR: str(elsewhere)}) in argv
    # a run id taken in that folder is taken, whatever <repo>/reports holds
    with pytest.raises(RefusedError, match="r1"):
        _run(repo, "pass", monkeypatch, requested_id="r1", report_dir=elsewhere)
