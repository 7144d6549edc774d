"""make e2e-full, one testbed less: the fault scenarios (tests/integration/test_faults.py) run
on the demo's testbed (tests/integration/test_demo.py), plain and provisioned, instead of
bringing up and provisioning one of their own (docs/testbed.md, "make e2e-full: the fault
scenarios on the demo's testbed").

tests/conftest.py calls ``reorder`` once -m and -k have deselected what does not run; the
fault scenarios' ``cluster`` fixture asks ``faults_share_the_demo_testbed`` whether to reuse
the running testbed and leave it up. make faults alone runs test_faults.py only: a fresh
testbed, taken down at the end."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

#: The tests of test_demo.py the fault scenarios go before, the first one selected: the one
#: that adds Slurm to the demo's testbed, and the one that takes the testbed down.
FAULTS_BEFORE = (
    "test_demo_through_slurm_drains_a_sick_node_and_cancels_what_cannot_start",
    "test_testbed_down_leaves_nothing_behind",
)


def faults_share_the_demo_testbed(items: Sequence[pytest.Item]) -> bool:
    """Whether the fault scenarios run on the demo's testbed: both files are in the run."""
    return {"test_demo.py", "test_faults.py"} <= {item.path.name for item in items}


def reorder(items: list[pytest.Item]) -> None:
    """Move the fault scenarios to just before the first test of FAULTS_BEFORE that runs (or
    after the demo's last test), keeping every file's own order."""
    if not faults_share_the_demo_testbed(items):
        return
    faults = [i for i in items if i.path.name == "test_faults.py"]
    rest = [i for i in items if i.path.name != "test_faults.py"]
    demo = [n for n, i in enumerate(rest) if i.path.name == "test_demo.py"]
    before = [n for n in demo if getattr(rest[n], "originalname", rest[n].name) in FAULTS_BEFORE]
    at = before[0] if before else demo[-1] + 1
    items[:] = [*rest[:at], *faults, *rest[at:]]
