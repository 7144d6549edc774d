"""gpufleet.core.rollout: the hosts a rolling (serial) play never reached, named at the end.

Real ansible-playbook runs with the repository's ansible.cfg on three local hosts: a play
with serial 1 whose first batch fails stops the run, and the callback names the two hosts
no batch reached; the same play without a failure, or without batches, names nobody; hosts
outside --limit are not "untouched"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAY = """
- name: Before the rollout
  hosts: all
  gather_facts: false
  tasks:
    - name: Touch every host
      ansible.builtin.debug:
        msg: hi
- name: Roll out
  hosts: all
  gather_facts: false
  serial: "{{ batch | default('100%') }}"
  max_fail_percentage: "{{ max_fail | default(100) }}"
  tasks:
    - name: Fail where asked
      ansible.builtin.fail:
        msg: broken
      when: inventory_hostname in (broken | default('')).split(',')
"""
INVENTORY = """
all:
  hosts:
    a: {ansible_connection: local, ansible_python_interpreter: "%s"}
    b: {ansible_connection: local, ansible_python_interpreter: "%s"}
    c: {ansible_connection: local, ansible_python_interpreter: "%s"}
"""


def play(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "inv.yml").write_text(INVENTORY % ((sys.executable,) * 3))
    bin_dir = Path(sys.executable).parent
    return subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "inv.yml", "play.yml", *extra],
        cwd=tmp_path,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def flat(r: subprocess.CompletedProcess[str]) -> str:
    return " ".join((r.stdout + r.stderr).split())


@pytest.mark.parametrize(
    ("extra", "cause"),
    [
        (("-e", "batch=1", "-e", "max_fail=0", "-e", "broken=a"), "past max_fail_percentage 0 %"),
        (("-e", "batch=1", "-e", "broken=a"), "every host of a batch failed"),
    ],
)
def test_a_stopped_rollout_names_the_hosts_no_batch_reached(
    tmp_path: Path, extra: tuple[str, ...], cause: str
) -> None:
    r = play(tmp_path, *extra)
    assert r.returncode != 0
    out = flat(r)
    assert "ROLLOUT STOPPED in play 'Roll out'" in out and cause in out
    # b and c ran the first play, but no batch of the rolling one
    assert "(failed: a). Left untouched by this run: b, c ->" in out


def test_max_fail_percentage_decides_whether_a_batch_failure_stops_the_rollout(
    tmp_path: Path,
) -> None:
    # serial 2: [a, b], [c]; a fails = 50 % of its batch
    stopped = flat(play(tmp_path, "-e", "batch=2", "-e", "max_fail=0", "-e", "broken=a"))
    assert "Left untouched by this run: c ->" in stopped
    going = play(tmp_path, "-e", "batch=2", "-e", "max_fail=100", "-e", "broken=a")
    assert going.returncode != 0  # a failed
    assert "ROLLOUT STOPPED" not in flat(going)
    assert "c : ok=1 changed=0 unreachable=0 failed=0 skipped=1" in flat(going)


def test_nothing_is_named_when_every_batch_ran_or_limit_left_hosts_out(tmp_path: Path) -> None:
    ok = play(tmp_path, "-e", "batch=1")
    assert ok.returncode == 0 and "ROLLOUT STOPPED" not in flat(ok)
    limited = flat(play(tmp_path, "-e", "batch=1", "-e", "broken=a", "--limit", "a,b"))
    assert "Left untouched by this run: b ->" in limited
    assert "c" not in limited.split("Left untouched by this run:")[1].split("->")[0]
