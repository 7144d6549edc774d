"""The fault harness's process control (tests/testbed_lib.py), without a testbed: the
controller-crash kill must take the whole process tree, including children that left the
process group with setsid (as ansible-playbook's workers do)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from testbed_lib import Run, run


def _alive(tag: str) -> list[int]:
    pids = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if tag in cmd.read_bytes().decode(errors="replace"):
                pids.append(int(cmd.parent.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def test_kill_on_a_line_takes_the_whole_tree_including_setsid_children(tmp_path: Path) -> None:
    tag = f"sleep 3{os.getpid() % 1000}.5"
    script = f"setsid {tag} & {tag} & echo started; wait; echo never"
    r = run(
        ["bash", "-c", script],
        timeout=60,
        log=tmp_path / "out.log",
        on_line=lambda line, _t: 0.3 if line.startswith("started") else None,
    )
    assert "killed" in r.marks and r.rc == -9, (r.rc, r.out)
    assert "never" not in r.out
    assert r.seconds < 20
    deadline = time.monotonic() + 5
    while _alive(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(tag), "a child outlived the controller kill"
    assert (tmp_path / "out.log").read_text().startswith("started")


def test_timeout_kills_and_reports_124() -> None:
    r = run(["bash", "-c", "echo hi; sleep 30"], timeout=1.5)
    assert r.rc == 124 and r.seconds < 10 and r.out == "hi\n"


def test_recap_reads_the_last_play_recap() -> None:
    out = (
        "PLAY RECAP ***\nnode1 : ok=3 changed=2 unreachable=0 failed=0 skipped=0\n"
        "PLAY RECAP ***\n"
        "node1                      : ok=9    changed=0    unreachable=0    failed=0    skipped=1\n"
        "node3                      : ok=1    changed=0    unreachable=1    failed=0    skipped=0\n"
    )
    assert Run(["x"], 0, out, 1.0).recap() == {"node1": (9, 0, 0, 0), "node3": (1, 0, 1, 0)}


def test_the_log_directory_is_created(tmp_path: Path) -> None:
    # a clean clone has no reports/faults/: the first scenario must not fail on it
    log = tmp_path / "new" / "dir" / "out.log"
    r = run(["bash", "-c", "echo ok"], timeout=30, log=log)
    assert r.rc == 0 and log.read_text() == "ok\n"
