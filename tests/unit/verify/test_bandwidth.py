"""nccl-tests formulas, size parsing and the expected-busbw table (gpufleet.verify.bandwidth)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet import units
from gpufleet.errors import RefusedError
from gpufleet.results import BandwidthRow
from gpufleet.verify import bandwidth as bench


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        pytest.param("all_reduce", 1, 0.0, id="allreduce-1"),
        pytest.param("all_reduce", 2, 1.0, id="allreduce-2"),
        pytest.param("all_reduce", 3, 4 / 3, id="allreduce-3"),
        pytest.param("all_reduce", 8, 1.75, id="allreduce-8"),
        pytest.param("all_reduce", 16, 1.875, id="allreduce-16"),
        pytest.param("all_gather", 8, 0.875, id="allgather-8"),
        pytest.param("reduce_scatter", 4, 0.75, id="reducescatter-4"),
        pytest.param("broadcast", 8, 1.0, id="broadcast-8"),
    ],
)
def test_busbw_factor_matches_nccl_tests(op: str, n: int, factor: float) -> None:
    assert bench.busbw_factor(n, op) == pytest.approx(factor)


def test_busbw_factor_refuses_unknown_op_and_zero_ranks() -> None:
    with pytest.raises(RefusedError, match="unknown collective"):
        bench.busbw_factor(2, "scan")
    with pytest.raises(RefusedError, match=">= 1"):
        bench.busbw_factor(0)


def test_algbw_is_bytes_per_second_in_1e9() -> None:
    # 1 GiB in 10 ms -> 107.37 GB/s (10^9, not 2^30)
    assert bench.algbw_gbs(1024**3, 0.01) == pytest.approx(107.3741824)
    with pytest.raises(ValueError, match="> 0"):
        bench.algbw_gbs(1, 0)


def test_make_row_keeps_nccl_tests_columns_consistent() -> None:
    row = bench.make_row(64 * 1024**2, "float32", 0.002, world_size=8, backend="nccl")
    assert row.count == 16 * 1024**2
    assert row.time_us == pytest.approx(2000.0)
    assert row.algbw == pytest.approx(33.5544, rel=1e-4)
    assert row.busbw == pytest.approx(row.algbw * 1.75, rel=1e-4)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("64K", 65536), ("16M", 16 * 1024**2), ("1G", 1024**3), ("8MiB", 8 * 2**20)],
)
def test_parse_size(text: str, value: int) -> None:
    assert units.parse_size(text) == value


def test_parse_sizes_sorts_and_dedupes_and_refuses_garbage() -> None:
    assert units.parse_sizes("1M, 4K,1M") == [4096, 1024**2]
    with pytest.raises(RefusedError, match="cannot read size"):
        units.parse_sizes("1T")
    with pytest.raises(RefusedError, match="no all-reduce sizes"):
        units.parse_sizes(" , ")


def test_shipped_table_loads_with_sources() -> None:
    rows = bench.load_table()
    assert rows, "empty shipped table"
    assert all(r.source and r.min_busbw > 0 for r in rows)
    names = " ".join(r.name for r in rows)
    for gpu in ("A100", "H100", "H200"):
        assert gpu in names


def test_threshold_for_eight_h200_on_one_node() -> None:
    t = bench.lookup_threshold("NVIDIA H200", 8, 1)
    assert t.value == pytest.approx(333)
    assert "H200" in t.source


@pytest.mark.parametrize(
    ("gpu", "world", "nnodes", "why"),
    [
        pytest.param(None, 4, 1, "CPU mode", id="cpu"),
        pytest.param("NVIDIA H200", 1, 1, "one rank", id="single-rank"),
        pytest.param("NVIDIA H200", 4, 1, "no table entry", id="h200x4"),
        pytest.param("Tesla V100-SXM2-32GB", 8, 1, "no table entry", id="unknown-gpu"),
        pytest.param("NVIDIA H100 80GB HBM3", 16, 2, "no table entry", id="cluster-no-fabric"),
    ],
)
def test_no_threshold_says_why(gpu: str | None, world: int, nnodes: int, why: str) -> None:
    t = bench.lookup_threshold(gpu, world, nnodes)
    assert t.value is None
    assert why in t.source


def test_cluster_threshold_needs_the_fabric_name() -> None:
    t = bench.lookup_threshold("NVIDIA H100", 16, 2, fabric="ib-400g-8nic")
    assert t.value == 300


def test_override_wins_even_on_cpu() -> None:
    t = bench.lookup_threshold(None, 2, 1, override=0.5)
    assert t.value == 0.5
    assert "option" in t.source


def test_user_table_is_read_before_the_shipped_one(tmp_path: Path) -> None:
    user = tmp_path / "bw.json"
    user.write_text(
        json.dumps(
            {
                "entries": [
                    {
                        "name": "lab H200 box",
                        "match": ["H200"],
                        "scope": "node",
                        "gpus": 8,
                        "min_busbw": 400,
                        "source": "our acceptance test",
                    }
                ]
            }
        )
    )
    t = bench.lookup_threshold("NVIDIA H200", 8, 1, table=bench.load_table(user))
    assert t.value == 400
    assert "lab H200 box" in t.source


def test_malformed_or_missing_user_table_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"entries": [{"name": "x"}]}')
    with pytest.raises(RefusedError, match="malformed"):
        bench.load_table(bad)
    with pytest.raises(RefusedError, match="does not exist"):
        bench.load_table(tmp_path / "nope.json")


def _row(size: int, busbw: float) -> BandwidthRow:
    return BandwidthRow(size, size // 4, "float32", 1.0, busbw, busbw, 8, "nccl")


def test_gate_uses_the_largest_size_not_the_average() -> None:
    rows = [_row(1024, 500.0), _row(2**30, 100.0), _row(2**20, 500.0)]
    rec = bench.gate(rows, bench.Threshold(333.0, "H200"), node="n1")
    assert rec.status == "fail"
    assert rec.value == 100.0
    assert rec.threshold == 333.0
    assert "1G" in rec.message
    assert rec.remedy
    ok = bench.gate([_row(2**30, 400.0)], bench.Threshold(333.0, "H200"))
    assert ok.status == "pass"


def test_gate_without_threshold_reports_and_passes() -> None:
    rec = bench.gate([_row(2**20, 0.7)], bench.Threshold(None, "CPU mode: no gate"))
    assert rec.status == "pass"
    assert "CPU mode" in rec.message


def test_gate_without_rows_fails() -> None:
    assert bench.gate([], bench.Threshold(None, "")).status == "fail"
