"""Shared fixtures for the project's own tests."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

import e2e_order

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="module")
def test_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A throw-away signing key for the driver and toolkit role tests: (key file, fingerprint)."""
    from roles_driver_helpers import gpg_test_key

    return gpg_test_key(tmp_path_factory.mktemp("gnupg"))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Generator[None, None, None]:
    """make test spreads work over pytest-xdist workers by group (--dist loadgroup): a test
    without a group of its own stays with the other tests of its file, so a module-scoped
    fixture (one ansible run for a table of cases) runs once. (Before every other
    implementation of this hook.)

    make e2e-full runs the fault scenarios on the demo's testbed, plain and provisioned,
    instead of a fresh one of their own (a testbed and a provisioning from bare less): they
    move to just before the Slurm demo (tests/e2e_order.py). (After every other
    implementation: -m and -k have deselected what does not run.)"""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    yield
    e2e_order.reorder(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under ``--dist loadgroup`` each worker's test ids carry ``@<group>`` (pytest-xdist
    adds it). Without it xdist spreads a file's tests over both workers, and the tests that
    share a module-scoped run (one ansible run for a table of cases, a venv built once) fail
    at random. Stop before any test runs (seen with pytest 9.2 + pytest-xdist 3.8, whose
    renaming pytest 9.2 ignores: requirements/controller.txt pins the pair that works)."""
    if node.config.getoption("dist", default="no") != "loadgroup":
        return
    lost = [i for i in ids if "@" not in i.rsplit("::", 1)[-1]]
    if lost:
        pytest.exit(
            f"pytest-xdist --dist loadgroup did not group {len(lost)} of {len(ids)} tests "
            f"(e.g. {lost[0]}): this pytest/pytest-xdist pair ignores xdist_group. "
            "Run make setup for the pinned pair (requirements/controller.txt).",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
