"""node_reboot's survey on this machine: what must be refused is refused before any change.

The survey (tasks/survey.yml, run for every node before the first batch of make
rolling-reboot, and first in each node's turn) holds no reboot and no Slurm change (asserted
below before anything runs). It runs here on localhost, over a local connection, with a
stand-in ``scontrol`` first on PATH that answers as slurmctld would. This machine is the
controller, so the survey must refuse it whatever Slurm says; a node an admin drained is
left alone before anything else is asked of it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from playbook_runner import REPO, ansible_env, run_playbook, task_keys

pytestmark = pytest.mark.slow

SURVEY = REPO / "roles" / "node_reboot" / "tasks" / "survey.yml"


def test_the_survey_cannot_reboot_or_change_slurm() -> None:
    text = SURVEY.read_text(encoding="utf-8")
    keys = task_keys(yaml.safe_load(text))
    assert not {k for k in keys if "reboot" in k or "import" in k}, keys
    assert "state=drain" not in text and "state=resume" not in text and "update" not in text


def _run(tmp_path: Path, answer: str, *extra: str) -> str:
    """The survey on localhost with a stand-in scontrol that prints ``answer``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "scontrol"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' '{answer}'\n", encoding="utf-8")
    fake.chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "gpu_nodes",
                    "gather_facts": False,
                    "environment": {"PATH": f"{bindir}:{os.environ['PATH']}",
                                    "SLURM_CONF": str(fake)},
                    "tasks": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "node_reboot",
                                "tasks_from": "survey",
                                "rolespec_validate": False,
                            }
                        },
                        {"ansible.builtin.debug": {"var": "__node_reboot_before.action"}},
                    ],
                }
            ]
        ),
        encoding="utf-8",
    )  # fmt: skip
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        yaml.safe_dump({"gpu_nodes": {"hosts": {"node7": {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
        }}}}),
        encoding="utf-8",
    )  # fmt: skip
    proc = run_playbook(play, "-e", "node_reboot_health=false", *extra, inventory=inv,
                        env=ansible_env(), timeout=180)  # fmt: skip
    return " ".join((proc.stdout + proc.stderr).split()) + f" rc={proc.returncode}"


def test_the_controller_is_refused_before_any_change(tmp_path: Path) -> None:
    out = _run(tmp_path, "NodeName=node7 State=MIXED Partitions=gpu")
    assert "node7: this is the controller (ansible_connection local)" in out, out[-3000:]
    assert "rc=2" in out


def test_slurmctlds_other_node_under_drain_mode_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path, "NodeName=node9 State=IDLE", "-e", "node_reboot_slurm=drain")
    assert "node7: node_reboot_slurm=drain, but slurmctld does not know it" in out, out[-3000:]
    assert "gpufleet_slurm_node_name" in out and "rc=2" in out


def test_an_admins_drain_is_left_alone_before_the_controller_question(tmp_path: Path) -> None:
    admin = "NodeName=node7 State=IDLE+DRAIN Reason=maintenance [root@2026-12-07T18:00:00]"
    out = _run(tmp_path, admin)
    assert "__node_reboot_before.action: skip" in out, out[-3000:]
    assert "this is the controller" not in out and "rc=0" in out
