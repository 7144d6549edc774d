"""tests/e2e_order.py: under make e2e-full the fault scenarios move onto the demo's testbed, just
before the test that adds Slurm to it; make faults alone, and any run without the demo's
tests, keeps pytest's order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

import e2e_order


@dataclass
class Item:
    path: Path
    name: str

    @property
    def originalname(self) -> str:
        return self.name.split("[", 1)[0]


def items(*ids: str) -> list[pytest.Item]:
    out = []
    for i in ids:
        file, name = i.split("::")
        out.append(Item(Path("tests/integration") / file, name))
    return cast("list[pytest.Item]", out)


def ids(got: list[Any]) -> list[str]:
    return [f"{i.path.name}::{i.name}" for i in got]


DEMO = [
    "test_demo.py::test_demo_provisions_verifies_and_reruns_without_change",
    "test_demo.py::test_mirror_credentials_stay_secret_on_the_nodes",
    f"test_demo.py::{e2e_order.FAULTS_BEFORE[0]}",
    "test_demo.py::test_rolling_reboot_through_slurm_loses_no_job_and_leaves_an_admins_drain",
    f"test_demo.py::{e2e_order.FAULTS_BEFORE[1]}",
]
FAULTS = ["test_faults.py::test_provision_killed[a]", "test_faults.py::test_link_cut"]
LATER = ["test_testbed.py::test_each_node_answers_ssh", "test_testbed_gpu.py::test_from_bare"]


def test_faults_go_just_before_slurm_is_added_in_their_own_order() -> None:
    got = items(*DEMO, *FAULTS, *LATER)
    e2e_order.reorder(got)
    assert ids(got) == [*DEMO[:2], *FAULTS, *DEMO[2:], *LATER]


def test_without_the_slurm_demo_they_go_before_the_testbed_is_taken_down() -> None:
    demo = [d for d in DEMO if e2e_order.FAULTS_BEFORE[0] not in d]
    got = items(*demo, *FAULTS, *LATER)
    e2e_order.reorder(got)
    assert ids(got) == [*demo[:-1], *FAULTS, demo[-1], *LATER]
    only_first = items(DEMO[0], *LATER, *FAULTS)  # neither selected: after the demo's last
    e2e_order.reorder(only_first)
    assert ids(only_first) == [DEMO[0], *FAULTS, *LATER]


@pytest.mark.parametrize("run", [[*FAULTS], [*LATER, *FAULTS], [*DEMO, *LATER]])
def test_without_both_files_nothing_moves(run: list[str]) -> None:
    got = items(*run)
    assert not e2e_order.faults_share_the_demo_testbed(got)
    e2e_order.reorder(got)
    assert ids(got) == run
