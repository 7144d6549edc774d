"""gpufleet.node.compute: the judgements of one node's matmul figures, on the recordings of
tests/fixtures/compute (H100 and H200 nodes: healthy, one GPU 15 % slow, at and below the
floor) against the shipped profiles' floors and tolerances."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.node import compute
from gpufleet.node.profiles import load_profiles
from gpufleet.results import Record

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "compute"


def figures(name: str) -> list[compute.DeviceFigure]:
    data = json.loads((FIXTURES / name).read_text())
    return compute.NodeCompute.from_meta(data["node"], data["meta"]).figures


def floor_of(profile: str) -> compute.FloorSpec:
    p = load_profiles()[profile]
    fig = p.floor(compute.FLOOR_FIELD)
    return compute.FloorSpec(p.name, fig.value, fig.source, fig.note)


def spread_of(profile: str) -> float:
    return float(load_profiles()[profile].tolerance(compute.SPREAD_FIELD).value)


def by_gpu(records: list[Record]) -> dict[str | None, Record]:
    return {r.gpu: r for r in records}


def test_the_healthy_h100_node_passes_every_judgement() -> None:
    figs = figures("h100-healthy.json")
    spread = compute.judge_spread("h100-a", figs, spread_of("hgx-h100-8gpu"))
    assert len(spread) == 8 and {r.status for r in spread} == {"pass"}
    floor = compute.judge_floor("h100-a", figs, floor_of("hgx-h100-8gpu"))
    assert floor.status == "pass" and floor.threshold == 715.0
    assert floor.value == min(f.tflops for f in figs)  # the lowest GPU is what it reports
    assert {r.status for r in compute.judge_repeats("h100-a", figs)} == {"pass"}


def test_one_gpu_15_percent_slow_in_a_node_of_8_fails_by_name() -> None:
    figs = figures("h100-one-gpu-15pct-slow.json")
    records = by_gpu(compute.judge_spread("h100-b", figs, spread_of("hgx-h100-8gpu")))
    failed = [gpu for gpu, r in records.items() if r.status == "fail"]
    assert failed == ["5"], records
    slow = records["5"]
    best = max(f.tflops for f in figs)
    assert slow.threshold == pytest.approx(0.9 * best, abs=1e-3)
    assert slow.value == 675.8
    assert "GPU 5" in slow.message and "0.85 x the node's best (GPU 2" in slow.message
    assert "nvidia-smi -q -d PERFORMANCE" in slow.remedy
    # the same GPU is also under the H100 floor: named there too, alone
    floor = compute.judge_floor("h100-b", figs, floor_of("hgx-h100-8gpu"))
    assert floor.status == "fail" and floor.gpu == "5" and "1 of 8 GPU(s)" in floor.message


def test_a_gpu_9_percent_below_the_best_passes_the_10_percent_rule() -> None:
    figs = [compute.DeviceFigure(str(i), "bfloat16", t) for i, t in enumerate([800.0, 728.1])]
    assert [r.status for r in compute.judge_spread("n", figs, 0.10)] == ["pass", "pass"]
    figs[1] = compute.DeviceFigure("1", "bfloat16", 719.9)
    assert [r.status for r in compute.judge_spread("n", figs, 0.10)] == ["pass", "fail"]


def test_an_h200_gpu_exactly_at_the_floor_passes() -> None:
    figs = figures("h200-at-floor.json")
    floor = compute.judge_floor("h200-a", figs, floor_of("hgx-h200-8gpu"))
    assert floor.status == "pass" and floor.value == 715.0 and floor.threshold == 715.0
    assert "profile hgx-h200-8gpu" in floor.message and "ml-engineering" in floor.message


def test_an_h200_node_power_capped_alike_passes_the_spread_and_fails_the_floor() -> None:
    figs = figures("h200-below-floor.json")
    assert {r.status for r in compute.judge_spread("h200-b", figs, 0.1)} == {"pass"}
    floor = compute.judge_floor("h200-b", figs, floor_of("hgx-h200-8gpu"))
    assert floor.status == "fail" and floor.gpu is None  # every GPU: no one GPU to name
    assert "8 of 8 GPU(s) below the floor 715.0" in floor.message
    assert floor.remedy == compute.REMEDY_FLOOR


def test_a_null_floor_is_not_judged_and_says_why() -> None:
    figs = figures("h100-healthy.json")
    floor = compute.judge_floor("l40s", figs, floor_of("pcie-l40s-8gpu"))
    assert floor.status == "skip"
    assert "no matmul_bf16_tflops floor" in floor.message and "ml-engineering" in floor.message
    assert compute.judge_floor("x", figs, None).status == "skip"


def test_the_cpu_is_one_device_compared_with_nothing_in_its_node() -> None:
    cpu = [compute.DeviceFigure("cpu", "float32", 0.04)]
    (rec,) = compute.judge_spread("n1", cpu, 0.5)
    assert rec.status == "pass" and rec.gpu is None and "one device" in rec.message
    floor = compute.judge_floor("n1", cpu, floor_of("simulated-cpu"))
    assert floor.status == "skip" and "simulated-cpu" in floor.message


def test_a_device_whose_measurement_failed_fails_with_its_error() -> None:
    figs = [
        compute.DeviceFigure("0", "bfloat16", 790.0),
        compute.DeviceFigure("1", "bfloat16", 0.0, error="OutOfMemoryError: CUDA out of memory"),
    ]
    records = by_gpu(compute.judge_spread("n", figs, 0.1))
    assert records["1"].status == "fail" and "out of memory" in records["1"].message
    assert records["0"].status == "pass"


def test_repeats_that_differ_on_one_gpu_fail_naming_it() -> None:
    figs = [
        compute.DeviceFigure("0", "bfloat16", 790.0, digests=("a" * 64, "a" * 64)),
        compute.DeviceFigure("1", "bfloat16", 790.0, digests=("a" * 64, "b" * 64)),
    ]
    records = by_gpu(compute.judge_repeats("n", figs))
    assert records["0"].status == "pass"
    assert records["1"].status == "fail" and records["1"].value == 2
    assert "silent data corruption" in records["1"].remedy


def test_tflops_is_two_m_n_k_per_second() -> None:
    # 8192^3 in 1.4 ms: 785.4 TFLOP/s (an H100's bf16 matmul)
    assert compute.tflops(8192, 8192, 8192, 1.4e-3) == pytest.approx(785.39, rel=1e-4)
    with pytest.raises(ValueError, match="time must be > 0"):
        compute.tflops(1, 1, 1, 0.0)


def test_the_best_shape_is_the_highest_median() -> None:
    shapes = [
        compute.ShapeFigure(4096, 4096, 4096, 700.0, 5),
        compute.ShapeFigure(8192, 8192, 8192, 790.0, 5),
    ]
    assert compute.best_shape(shapes).m == 8192
    with pytest.raises(ValueError, match="no shape"):
        compute.best_shape([])


def test_the_node_figure_is_the_median_of_its_gpus_bf16() -> None:
    data = json.loads((FIXTURES / "h100-one-gpu-15pct-slow.json").read_text())
    nc = compute.NodeCompute.from_meta("h100-b", data["meta"])
    assert nc.node_tflops() == pytest.approx(789.35)  # one slow GPU barely moves the median
    assert nc.sdc_key is not None and nc.sdc_key.model == "NVIDIA H100 80GB HBM3"


def test_a_paused_warm_up_call_does_not_shrink_the_timed_runs() -> None:
    """Runs are sized from the fastest warm-up call: one call that caught a pause (0.3 s
    instead of 0.4 ms) must not make every timed run a single matmul."""
    from gpufleet.node.compute_bench import MAX_INNER, inner_count

    assert inner_count([0.0004, 0.0004, 0.3], 0.05) == 125
    assert inner_count([0.3, 0.0004, 0.0004], 0.05) == 125
    assert inner_count([0.2, 0.1], 0.05) == 1  # a slow op: one matmul per run
    assert inner_count([0.0, 1e-9], 0.05) == MAX_INNER  # an op too fast to time
