"""One ``make verify``: the controller lock, the run id, the playbook, and the exit code.

    gpufleet verify [--inventory INV] [--run-id ID] [--lock-wait S] [--launcher ssh|slurm]
                    [-- ANSIBLE ARGS...]

is what ``make verify`` runs; call it directly where the exit code matters (GNU make turns
every failed recipe into exit 2). Exit codes, as everywhere in gpufleet:

- 0: the report says pass;
- 1: a check, smoke test or cluster step failed, or the playbook stopped before writing a
  report (the summary or the ansible output says what);
- 2: refused before anything ran: a bad run id (:mod:`gpufleet.verify.run_id`), another
  ``make verify`` of this checkout still holds ``reports/.verify.lock`` after the wait, or
  the check play (``playbooks/check_inventory.yml``) refused the inventory or a variable.
  Bad input is refused at once even while another run holds the lock: the run id is checked
  before the lock, and a busy lock runs the check play alone before the wait.

The run id and the extra arguments are data: they are passed to ``ansible-playbook`` as
argv elements, never through a shell.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpufleet.errors import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, RefusedError
from gpufleet.results import flock_acquire
from gpufleet.verify import run_id as runid

#: Printed by the verify play once the check play passed: after it, a failure is a failure
#: of the run (1), before it a refusal of the input (2).
RUN_PLAY = "PLAY [Verify the GPU nodes]"


class LockBusy(RefusedError):
    """Another ``make verify`` of this checkout holds the lock past the wait."""


@contextlib.contextmanager
def controller_lock(
    path: Path, wait_s: float, say: IO[str], on_busy: Callable[[], None] | None = None
) -> Iterator[None]:
    """``flock`` on ``path``: at once, or after waiting up to ``wait_s`` seconds. When the
    lock is busy, ``on_busy`` runs first (it may refuse the run before any wait)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        if not flock_acquire(fh, 0, 0.5):
            if on_busy is not None:
                on_busy()
            print(f">> another make verify holds {path}: waiting up to {wait_s:g}s", file=say)
            if not flock_acquire(fh, wait_s, 0.5):
                raise LockBusy(
                    f"refused: another make verify still runs on these nodes after "
                    f"{wait_s:g}s ({path}) -> wait for it, or raise VERIFY_LOCK_WAIT"
                )
        yield


class InputRefused(RefusedError):
    """The check play refused the inventory or a variable while another run held the lock."""


def _stream(argv: Sequence[str], cwd: Path, say: IO[str], mark: str = "") -> tuple[int, bool]:
    """Run ``argv``, copying its output to ``say`` line by line; (exit code, whether a line
    started with ``mark``)."""
    seen = False
    with subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            say.write(line)
            say.flush()
            seen = seen or bool(mark and line.startswith(mark))
        return proc.wait(), seen


def check_input(repo: Path, exe: str, inventory: str, extra: Sequence[str], say: IO[str]) -> None:
    """playbooks/check_inventory.yml for verify's roles alone (no change, no connection to a
    node): raises InputRefused when it refuses. Run when another make verify holds the lock,
    so that bad input is refused at once instead of after the wait (verify.yml runs the same
    check first thing once the lock is taken)."""
    argv = [exe, str(repo / "playbooks" / "check_inventory.yml"), "-i", inventory,
            "-e", json.dumps({"gpufleet_check_roles": ["verify"]}), *extra]  # fmt: skip
    print(">> another make verify holds the lock: checking this run's input first", file=say)
    rc, _ = _stream(argv, repo, say)
    if rc != 0:
        raise InputRefused(
            f"refused before any change: the check play refused the inventory or a variable "
            f"(rc {rc}, see above); nothing waited for the other run's lock"
        )


REPORT_DIR_VAR = "__verify_report_dir_cli"
"""The extra variable that tells playbooks/verify.yml where gpufleet verify reads the report."""


@dataclass(frozen=True)
class Outcome:
    run_id: str
    exit_code: int
    status: str  # pass, fail, refused, no-report
    summary: Path


def run(
    repo: Path,
    inventory: str,
    requested_id: str = "",
    extra: Sequence[str] = (),
    lock_wait: float = 900.0,
    ansible_playbook: str = "",
    say: IO[str] = sys.stdout,
    report_dir: Path | None = None,
) -> Outcome:
    """Lock, claim a run id, run playbooks/verify.yml and read its verdict. ``report_dir``
    (default <repo>/reports) holds the lock, the run ids and the reports: the playbook gets
    it as ``__verify_report_dir_cli``, the default of verify_report_dir, and its check play
    refuses a verify_report_dir set elsewhere (the report would land where this never looks)."""
    reports = (report_dir or repo / "reports").resolve()
    extra = ["-e", json.dumps({REPORT_DIR_VAR: str(reports)}), *extra]
    # bad input is refused at once, not after waiting for another run's lock: the run id
    # here, the inventory and the variables by the check play when the lock is busy
    if requested_id:
        runid.validate(requested_id)
    exe = ansible_playbook or str(Path(sys.executable).parent / "ansible-playbook")

    def busy() -> None:
        check_input(repo, exe, inventory, extra, say)

    with controller_lock(reports / ".verify.lock", lock_wait, say, on_busy=busy):
        run_id = runid.claim(reports, requested_id)
        summary = reports / run_id / "summary.json"
        # __verify_controller_locked: this process holds the checkout's controller lock, so a
        # node lock of an earlier run of this checkout is stale (roles/verify prepare.yml)
        argv = [exe, str(repo / "playbooks" / "verify.yml"), "-i", inventory,
                "-e", json.dumps({"verify_run_id": run_id, "__verify_controller_locked": True}),
                *extra]  # fmt: skip
        print(f">> verify run {run_id}", file=say, flush=True)
        rc, started_run = _stream(argv, repo, say, RUN_PLAY)
    if not summary.is_file():
        if rc != 0 and not started_run:
            print(
                f">> refused before any change: ansible-playbook stopped (rc {rc}) before the "
                "verify play started: bad ansible arguments, or the check play refused the "
                "inventory or a variable (see above)",
                file=say,
            )
            with contextlib.suppress(OSError):
                summary.parent.rmdir()  # the claimed run folder, still empty: nothing ran
            return Outcome(run_id, EXIT_REFUSED, "refused", summary)
        print(
            f">> no report for run {run_id}: the playbook stopped before the report step "
            f"(ansible rc={rc})",
            file=say,
        )
        return Outcome(run_id, EXIT_FAILED, "no-report", summary)
    status = str(json.loads(summary.read_text(encoding="utf-8")).get("status", "fail"))
    print(
        f">> report: {summary.parent / 'index.html'} (summary.md, summary.json, junit.xml; "
        f"{reports / 'latest'}): {status}",
        file=say,
    )
    ok = status == "pass" and rc == 0
    return Outcome(run_id, EXIT_OK if ok else EXIT_FAILED, status, summary)


def find_repo(start: Path) -> Path:
    """The gpufleet checkout at or above ``start`` (it has playbooks/verify.yml)."""
    for d in (start, *start.parents):
        if (d / "playbooks" / "verify.yml").is_file() and (d / "roles" / "verify").is_dir():
            return d
    raise RefusedError(
        f"{start} is not inside a gpufleet checkout (no playbooks/verify.yml above it) -> "
        "run gpufleet verify from the checkout, or pass --repo"
    )
