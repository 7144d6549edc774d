"""SyncBatchNorm: converted before DDP; running stats identical and equal to the global batch.

On CPU (gloo, torch 2.13) DDP refuses SyncBatchNorm ("SyncBatchNorm layers only work with
GPU modules") and its forward refuses CPU input: SyncBatchNorm needs an accelerator, so the
test reports skip with torch's errors as the reason (and fails when torch starts to accept
CPU, so that this suite gets updated).
"""

from __future__ import annotations

import math

import pytest

from conftest import Launch, Mode, Smoke, Torchrun

REMEDY = "run python -m torch.distributed.run --nproc-per-node N -m gpufleet.verify.workers.syncbn"


@pytest.fixture(scope="module")
def syncbn_run(module_torchrun: Torchrun) -> Launch:
    return module_torchrun("syncbn")


@pytest.mark.torchrun
def test_syncbn_running_stats_match_global_batch(
    syncbn_run: Launch, mode: Mode, smoke: Smoke
) -> None:
    smoke.note(remedy=REMEDY)
    run = syncbn_run
    assert not run.timed_out, run.explain()
    assert run.rc == 0, run.explain()
    assert len(run.ranks) == mode.nproc, run.explain()
    assert run.leftovers == []
    ranks = run.ranks
    assert {r["converted_to"] for r in ranks} == {"SyncBatchNorm"}
    if mode.mode != "gpu":
        assert all(r["path"] == "unsupported-on-cpu" for r in ranks)
        ddp_err, fwd_err = ranks[0]["ddp_error"], ranks[0]["forward_error"]
        assert ddp_err and fwd_err, (
            f"torch accepted SyncBatchNorm on CPU (DDP error {ddp_err!r}, forward error "
            f"{fwd_err!r}): update smoke_tests/test_syncbn.py to run it on CPU"
        )
        pytest.skip(f"SyncBatchNorm needs an accelerator: torch on CPU says {fwd_err!r}")
    assert {r["path"] for r in ranks} == {"syncbn"}
    means = {tuple(r["running_mean"]) for r in ranks}
    variances = {tuple(r["running_var"]) for r in ranks}
    assert len(means) == 1, "running means differ between ranks"
    assert len(variances) == 1, "running variances differ between ranks"
    # the worker's reference is plain BatchNorm on the whole global batch; compare here
    worst = max(
        abs(a - b)
        for r in ranks
        for got, ref in (("running_mean", "ref_mean"), ("running_var", "ref_var"))
        for a, b in zip(r[got], r[ref], strict=True)
    )
    assert math.isfinite(worst)
    assert worst <= 1e-4, f"running stats differ from the global batch's by {worst}"
    smoke.note(
        value=worst,
        threshold=1e-4,
        message=f"SyncBatchNorm on {len(ranks)} GPU rank(s): stats identical, "
        f"max |diff| to the global batch {worst:.2e}",
    )
