"""What the torch_env role tests on localhost (venv and conda) share: the local wheelhouse and
index (no internet), the base python, and a world-traversable work directory."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

TORCH_WHEELS = Path(os.environ.get("GPUFLEET_TEST_WHEELS", "/opt/wheels"))
LOCAL_INDEX = os.environ.get("GPUFLEET_TEST_INDEX", "file:///opt/pypi/simple")
BASE_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


def workspace_dir(prefix: str, why_root: str) -> Iterator[Path]:
    """A directory under /tmp every user can traverse (an env owner may be `nobody`), removed
    afterwards; skips the tests without the CPU torch wheel, the base python or root."""
    if not any(TORCH_WHEELS.glob("torch-2.13.0+cpu-*.whl")) or not BASE_PYTHON.exists():
        pytest.skip(f"needs torch-2.13.0+cpu in {TORCH_WHEELS} and {BASE_PYTHON}")
    if os.geteuid() != 0:
        pytest.skip(why_root)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
