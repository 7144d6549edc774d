"""gpufleet.node.dp_balance: DataParallel's GPU-0 memory against the others' mean."""

from __future__ import annotations

from gpufleet.node import dp_balance

MIB = 2**20


def test_gpu0_holding_twice_the_others_warns() -> None:
    got = dp_balance.verdict([1200 * MIB, 600 * MIB, 600 * MIB, 600 * MIB], 1.5)
    assert (
        (got.status, got.value) == ("warn", 2.0)
        and "above 1.5" in got.text
        and "DistributedDataParallel" in got.remedy
    )


def test_a_small_imbalance_passes() -> None:
    got = dp_balance.verdict([700 * MIB, 600 * MIB], 1.5)
    assert got.status == "pass" and got.value == 1.167 and got.remedy == ""


def test_without_a_second_gpu_in_use_there_is_nothing_to_judge() -> None:
    assert dp_balance.verdict([700 * MIB]).status == "skip"
    assert dp_balance.verdict([700 * MIB, 0]).status == "skip"
