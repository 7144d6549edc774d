"""SyncBatchNorm: converted before DDP; running stats identical and equal to the global batch.

On CPU (gloo, torch 2.13) DDP refuses SyncBatchNorm ("SyncBatchNorm layers only work with
GPU modules") and its forward refuses CPU input; the worker then checks what gloo supports:
the all-reduce of per-rank moments that SyncBatchNorm performs, against the global batch.
"""

from __future__ import annotations

import pytest

from conftest import Launch, Mode, Smoke, Torchrun

REMEDY = "run python -m torch.distributed.run --nproc-per-node N -m gpufleet.workers.syncbn"


@pytest.fixture(scope="module")
def syncbn_run(
    request: pytest.FixtureRequest, mode: Mode, tmp_path_factory: pytest.TempPathFactory
) -> Launch:
    return Torchrun(request.config, mode, tmp_path_factory.mktemp("syncbn"))("syncbn")


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
    means = {tuple(r["running_mean"]) for r in ranks}
    variances = {tuple(r["running_var"]) for r in ranks}
    assert len(means) == 1, "running means differ between ranks"
    assert len(variances) == 1, "running variances differ between ranks"
    worst = max(float(r["ref_max_diff"]) for r in ranks)
    assert worst <= 1e-4, f"running stats differ from the global batch's by {worst}"
    path = ranks[0]["path"]
    if mode.mode == "gpu":
        assert path == "syncbn"
    else:
        assert path == "manual-allreduce"
        assert all("only work with GPU modules" in str(r["ddp_error"]) for r in ranks)
        assert all("expected input tensor to be on GPU" in str(r["forward_error"]) for r in ranks)
    smoke.note(
        value=worst,
        threshold=1e-4,
        message=f"path {path}: stats identical on {len(ranks)} ranks, "
        f"max |diff| to global batch {worst:.2e}",
    )
