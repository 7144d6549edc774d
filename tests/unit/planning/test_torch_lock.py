"""gpufleet.planning.torch_lock: the hash lock's text, its reading, and its judgement
against the torch step (the install from it: tests/roles/test_torch_env_sources.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.planning import torch_lock as TL

H1, H2, H3 = "a" * 64, "b" * 64, "c" * 64
HEADER: dict[str, Any] = {
    "torch": "2.13.0",
    "variant": "cu130",
    "cuda": "13.0",
    "nccl": "2.29.7",
    "python": "3.11",
}
STEP = {"torch": "2.13.0", "variant": "cu130", "cuda": "13.0", "nccl": "2.29.7"}


def lock_text(**header: Any) -> str:
    pins = [
        TL.wheel_pin("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl", H1),
        TL.wheel_pin("nvidia_nccl_cu13-2.29.7-py3-none-manylinux_2_18_x86_64.whl", H2),
        TL.wheel_pin("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", H3),
    ]
    return TL.render({**HEADER, **header}, pins)


def test_written_lock_reads_back() -> None:
    lock = TL.parse(lock_text())
    assert lock.header["variant"] == "cu130" and lock.header["schema"] == TL.LOCK_SCHEMA
    assert set(lock.pins) == {"torch", "nvidia-nccl-cu13", "numpy"}
    assert lock.pins["torch"].exact, "PyPI's unlabelled torch is pinned with ==="
    assert "torch===2.13.0 \\\n    --hash=sha256:" + H1 in lock_text()
    assert not TL.wheel_pin("torch-2.13.0+cu126-cp311-cp311-linux_x86_64.whl", H1).exact


def test_a_lock_of_the_step_has_no_problems() -> None:
    lock = TL.parse(lock_text())
    assert TL.lock_problems(lock, STEP, "3.11", ["numpy==2.4.6", "NumPy"]) == []


@pytest.mark.parametrize(
    ("header", "python", "fragment"),
    [
        (
            {"variant": "cu126", "cuda": "12.6"},
            "3.11",
            "made for variant 'cu126', the plan needs 'cu130'",
        ),
        ({"torch": "2.12.1"}, "3.11", "made for torch '2.12.1'"),
        ({}, "3.12", "made for python '3.11', the plan needs '3.12'"),
    ],
)
def test_a_lock_of_another_build_is_named(
    header: dict[str, Any], python: str, fragment: str
) -> None:
    problems = TL.lock_problems(TL.parse(lock_text(**header)), STEP, python, [])
    assert any(fragment in p for p in problems), problems


def test_packages_must_be_pinned_at_their_version() -> None:
    lock = TL.parse(lock_text())
    problems = TL.lock_problems(lock, STEP, "3.11", ["numpy==2.4.5", "pytest==9.1.1"])
    assert "the lock pins numpy 2.4.6, torch_env installs 'numpy==2.4.5'" in problems
    assert "the lock pins no pytest (torch_env installs 'pytest==9.1.1')" in problems


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("numpy==2.4.6 --hash=sha256:" + H3 + "\n", "has no '# gpufleet-lock:' line"),
        ("# gpufleet-lock: [1]\n", "not a JSON object"),
        ("# gpufleet-lock: {nope\n", "not JSON"),
        ('# gpufleet-lock: {"schema": 9}\n', "schema 9"),
        ('# gpufleet-lock: {"schema": 1}\nnumpy>=2 --hash=sha256:' + H3, "not pinned"),
        ('# gpufleet-lock: {"schema": 1}\nnumpy==2.4.6\n', "numpy has no --hash"),
        ('# gpufleet-lock: {"schema": 1}\nnumpy==2.4.6 --hash=md5:00\n', "is not --hash=sha256"),
        (
            '# gpufleet-lock: {"schema": 1}\nnumpy==1 --hash=sha256:'
            + H1
            + "\nNumPy==1 --hash=sha256:"
            + H2,
            "numpy is pinned twice",
        ),
    ],
)
def test_unreadable_locks_are_refused_naming_the_line(text: str, fragment: str) -> None:
    with pytest.raises(TL.LockError, match=fragment):
        TL.parse(text, "gpufleet_torch_lock 'x.lock'")


def test_a_wheel_name_that_is_not_one_is_refused() -> None:
    with pytest.raises(TL.LockError, match="not a wheel file name"):
        TL.wheel_pin("torch-2.13.0.tar.gz", H1)
