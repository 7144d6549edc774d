"""All-reduce on all local ranks: exact correctness and a bandwidth sweep (nccl-tests formulas)."""

from __future__ import annotations

import pytest

from conftest import Launch, Mode, Smoke, Torchrun
from gpufleet.results import BandwidthRow
from gpufleet.verify import bandwidth as bench

REMEDY = (
    "NCCL_DEBUG=INFO python -m torch.distributed.run --nproc-per-node N "
    "-m gpufleet.verify.workers.allreduce --out-dir /tmp/ar; check nvidia-smi topo -m"
)


@pytest.fixture(scope="module")
def ar_run(request: pytest.FixtureRequest, mode: Mode, module_torchrun: Torchrun) -> Launch:
    cfg = request.config
    args: list[str] = []
    sizes = cfg.getoption("--sizes") or (
        bench.DEFAULT_GPU_SIZES if mode.mode == "gpu" else bench.DEFAULT_CPU_SIZES
    )
    args += ["--sizes", sizes]
    if cfg.getoption("--iters"):
        args += ["--iters", str(cfg.getoption("--iters"))]
    if cfg.getoption("--warmup"):
        args += ["--warmup", str(cfg.getoption("--warmup"))]
    if cfg.getoption("--busbw-min"):
        args += ["--busbw-min", str(cfg.getoption("--busbw-min"))]
    if cfg.getoption("--bandwidth-table"):
        args += ["--bandwidth-table", str(cfg.getoption("--bandwidth-table"))]
    return module_torchrun("allreduce", *args)


def _rows(run: Launch) -> list[BandwidthRow]:
    r0 = next(r for r in run.ranks if r["rank"] == 0)
    return [BandwidthRow(**row) for row in r0["rows"]]


@pytest.mark.torchrun
def test_allreduce_sum_exact(ar_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY)
    assert not ar_run.timed_out, ar_run.explain()
    assert len(ar_run.ranks) == mode.nproc, ar_run.explain()
    assert ar_run.leftovers == []
    for r in ar_run.ranks:
        assert r.get("error") is None, ar_run.explain()
        assert r["wrong"] == 0, f"rank {r['rank']}: {r['wrong']} wrong elements"
        assert r["expected_sum"] == mode.nproc * (mode.nproc + 1) // 2
    wrong_in_sweep = sum(row.wrong for row in _rows(ar_run))
    assert wrong_in_sweep == 0, f"{wrong_in_sweep} wrong elements during the sweep"
    smoke.note(
        value=0, threshold=0, message=f"sum of rank+1 over {mode.nproc} ranks exact at every size"
    )


@pytest.mark.torchrun
def test_allreduce_bandwidth(ar_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY)
    assert ar_run.ranks, ar_run.explain()
    rows = _rows(ar_run)
    assert rows, ar_run.explain()
    smoke.bandwidth(rows)
    n = mode.nproc
    # independent of gpufleet.verify.bandwidth: recompute every row from the raw per-iteration
    # timings
    # and byte counts each rank recorded (nccl-tests PERFORMANCE.md: algbw = bytes / time,
    # busbw = algbw * 2(n-1)/n for all_reduce; time = max over ranks of the mean iteration)
    raw = {r["rank"]: {x["size_bytes"]: x for x in r["raw"]} for r in ar_run.ranks}
    assert sorted(raw) == list(range(n)), ar_run.explain()
    exact = n * (n + 1) / 2
    for row in rows:
        assert row.world_size == n
        assert row.backend == mode.backend
        per_rank = [raw[k][row.size_bytes] for k in range(n)]
        for k, x in enumerate(per_rank):
            assert (
                x["count"] * {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[x["dtype"]]
                == row.size_bytes
            )
            assert len(x["iter_s"]) >= 1 and all(t > 0 for t in x["iter_s"])
            assert x["reduced_min"] == x["reduced_max"] == exact, (
                f"rank {k}, {row.size_bytes} B: reduced values in "
                f"[{x['reduced_min']}, {x['reduced_max']}], expected exactly {exact}"
            )
        t = max(sum(x["iter_s"]) / len(x["iter_s"]) for x in per_rank)
        algbw = row.size_bytes / t / 1e9
        assert row.time_us == pytest.approx(t * 1e6, rel=1e-3)
        assert row.algbw == pytest.approx(algbw, rel=1e-3, abs=1e-4)
        assert row.busbw == pytest.approx(algbw * 2 * (n - 1) / n, rel=1e-3, abs=1e-4)
    r0 = next(r for r in ar_run.ranks if r["rank"] == 0)
    gate = r0["gate"]
    smoke.meta(
        busbw_factor=2 * (n - 1) / n,
        threshold=r0["threshold"],
        threshold_source=r0["threshold_source"],
        time="max over ranks of the per-iteration mean",
    )
    smoke.note(
        value=gate["value"],
        threshold=gate["threshold"],
        message=gate["message"],
        remedy=gate["remedy"] or REMEDY,
    )
    assert gate["status"] != "fail", gate["message"]
    assert ar_run.rc == 0, ar_run.explain()
