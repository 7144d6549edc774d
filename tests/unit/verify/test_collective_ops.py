"""gpufleet.verify.collective_ops without torch: the correctness patterns against a plain
Python model of each collective, the verdict of one collective, the sizes."""

from __future__ import annotations

import pytest

from gpufleet.verify import bandwidth as bench
from gpufleet.verify import collective_ops as coll


def simulate(op: str, world: int) -> list[list[float]]:
    """Each rank's output chunks after ``op``, computed from the inputs the ranks hold."""
    inputs = [coll.pattern(op, r, world) for r in range(world)]
    if op == "all_gather":
        return [[inputs[j][0] for j in range(world)] for _ in range(world)]
    if op == "reduce_scatter":
        return [[sum(inputs[r][j] for r in range(world))] for j in range(world)]
    if op == "alltoall":
        return [[inputs[i][r] for i in range(world)] for r in range(world)]
    if op == "broadcast":
        return [[inputs[0][0]] for _ in range(world)]
    if op == "sendrecv":  # rank r receives what rank r - 1 sent
        return [[inputs[(r - 1) % world][0]] for r in range(world)]
    raise AssertionError(op)


@pytest.mark.parametrize("op", coll.OPS)
@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_the_expected_output_is_what_the_collective_makes_of_the_inputs(
    op: str, world: int
) -> None:
    got = simulate(op, world)
    assert got == [coll.expected(op, r, world) for r in range(world)]
    # every output chunk says where it came from: no two ranks' outputs agree by accident
    if op in ("reduce_scatter", "alltoall", "sendrecv"):
        assert len({tuple(x) for x in got}) == world


@pytest.mark.parametrize(
    ("op", "world", "factor"),
    [
        ("all_gather", 8, 0.875),
        ("reduce_scatter", 4, 0.75),
        ("alltoall", 2, 0.5),
        ("broadcast", 8, 1.0),
        ("sendrecv", 16, 1.0),
        ("all_reduce", 8, 1.75),
    ],
)
def test_nccl_tests_factors(op: str, world: int, factor: float) -> None:
    assert bench.busbw_factor(world, op) == factor


def test_a_row_carries_its_collective_and_factor() -> None:
    row = bench.make_row(1 << 20, "float32", 1e-3, 4, "gloo", op="alltoall")
    assert row.op == "alltoall" and row.busbw == pytest.approx(row.algbw * 0.75, rel=1e-5)


def test_a_backend_that_lacks_a_collective_is_told_from_a_failure() -> None:
    assert coll.unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert coll.unsupported("alltoall is not supported by this backend")
    assert not coll.unsupported(RuntimeError("Connection reset by peer"))


def test_the_verdicts_of_one_collective() -> None:
    rows = [
        bench.make_row(s, "float32", 1e-3, 4, "gloo", op="broadcast") for s in (1 << 16, 1 << 20)
    ]
    ok = coll.op_record(coll.OpResult("broadcast", rows=rows), "n1", 4, "gloo")
    assert ok.status == "pass" and ok.value == rows[1].busbw and "at 1M (factor 1)" in ok.message
    wrong = coll.op_record(coll.OpResult("broadcast", wrong=3, rows=rows), "n1", 4, "gloo")
    assert wrong.status == "fail" and wrong.value == 3 and "ECC" in wrong.remedy
    skipped = coll.op_record(coll.OpResult("alltoall", skipped="gloo lacks it"), "n1", 4, "gloo")
    assert (
        skipped.status == "skip" and "gloo does not run it here (gloo lacks it)" in skipped.message
    )
    broken = coll.op_record(
        coll.OpResult("alltoall", error="RuntimeError: timed out"), "n1", 4, "gloo"
    )
    assert broken.status == "fail" and "timed out" in broken.message


def test_sizes_are_whole_chunks_of_one_ranks_buffer() -> None:
    # all_gather of 1 MiB over 4 ranks: each rank contributes 64 Ki float32 elements
    assert coll.size_count("all_gather", 1 << 20, 4, 4) == 65536
    assert coll.size_count("broadcast", 1 << 20, 4, 4) == 262144
    assert coll.size_count("alltoall", 8, 4, 4) == 1  # never empty
