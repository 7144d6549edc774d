"""Shared fixtures for the project's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="module")
def test_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A throw-away signing key for the driver and toolkit role tests: (key file, fingerprint)."""
    from roles_driver_helpers import gpg_test_key

    return gpg_test_key(tmp_path_factory.mktemp("gnupg"))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """make test spreads work over pytest-xdist workers by group (--dist loadgroup): a test
    without a group of its own stays with the other tests of its file, so a module-scoped
    fixture (one ansible run for a table of cases) runs once."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
