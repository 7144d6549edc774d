"""DistributedDataParallel on all local GPUs (NCCL) or 2 CPU ranks (gloo), via torchrun."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import Launch, Mode, Smoke, Torchrun

REMEDY = (
    "run the worker by hand with NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL: "
    "python -m torch.distributed.run --nproc-per-node N -m gpufleet.verify.workers.ddp "
    "--out-dir /tmp/ddp"
)


@pytest.fixture(scope="module")
def ddp_run(module_torchrun: Torchrun) -> Launch:
    return module_torchrun("ddp", "--steps", "20")


def _ok(run: Launch, mode: Mode) -> list[dict[str, Any]]:
    assert not run.timed_out, run.explain()
    assert run.rc == 0, run.explain()
    assert len(run.ranks) == mode.nproc, run.explain()
    return run.ranks


@pytest.mark.torchrun
def test_ddp_launch_and_teardown(ddp_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY, value=mode.nproc)
    ranks = _ok(ddp_run, mode)
    assert {r["backend"] for r in ranks} == {mode.backend}
    assert all(r["destroyed"] for r in ranks), "destroy_process_group did not complete"
    assert ddp_run.leftovers == [], f"processes left behind: {ddp_run.leftovers}"
    smoke.note(message=f"{mode.nproc} ranks, {ddp_run.duration_s:.1f}s, no process left")


@pytest.mark.torchrun
def test_ddp_sampler_shards_disjoint_and_cover(ddp_run: Launch, mode: Mode, smoke: Smoke) -> None:
    """Equal shards that cover the dataset; they overlap only by DistributedSampler's padding
    (drop_last=False repeats the first ceil(n/w)*w - n indices so every rank gets as many)."""
    smoke.note(remedy=REMEDY)
    ranks = _ok(ddp_run, mode)
    n = int(ranks[0]["sampler"]["dataset_size"])
    w = len(ranks)
    per_rank = -(-n // w)
    padding = per_rank * w - n
    for epoch in ("0", "1"):
        shards = [list(r["sampler"]["epochs"][epoch]) for r in ranks]
        assert all(len(s) == per_rank for s in shards), f"epoch {epoch}: unequal shards"
        assert all(len(set(s)) == len(s) for s in shards), f"epoch {epoch}: repeats in a shard"
        union = set().union(*map(set, shards))
        assert union == set(range(n)), f"epoch {epoch}: {sorted(set(range(n)) - union)} missing"
        overlap = sum(len(s) for s in shards) - len(union)
        assert overlap == padding, (
            f"epoch {epoch}: ranks share {overlap} samples, expected only the {padding} "
            "padding samples"
        )
    smoke.note(
        value=padding,
        message=(f"{w} shards of {per_rank} cover {n} samples; overlap = padding ({padding})"),
    )


@pytest.mark.torchrun
def test_ddp_sampler_set_epoch_reshuffles(ddp_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY)
    ranks = _ok(ddp_run, mode)
    for r in ranks:
        e = r["sampler"]["epochs"]
        assert e["0"] != e["1"], f"rank {r['rank']}: set_epoch(1) gave the epoch-0 order"


@pytest.mark.torchrun
def test_ddp_loss_decreases(ddp_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY)
    ranks = _ok(ddp_run, mode)
    r0 = ranks[0]
    # from the recorded curve, not the worker's own summary of it
    losses = [float(v) for v in r0["losses"]]
    assert len(losses) == int(r0["steps"]) >= 4, f"{len(losses)} losses for {r0['steps']} steps"
    assert all(r["losses"] == r0["losses"] for r in ranks), "ranks saw different mean losses"
    k = len(losses) // 4
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    smoke.note(
        value=round(last, 5),
        threshold=round(first, 5),
        message=f"mean loss {first:.4f} -> {last:.4f} over {r0['steps']} steps",
    )
    assert last < first, f"loss did not decrease: {first} -> {last}"


@pytest.mark.torchrun
def test_ddp_parameters_identical_on_all_ranks(ddp_run: Launch, mode: Mode, smoke: Smoke) -> None:
    smoke.note(remedy=REMEDY)
    ranks = _ok(ddp_run, mode)
    digests = {r["param_sha256"] for r in ranks}
    assert len(digests) == 1, f"parameters differ between ranks: {digests}"
    assert all(r["params_max_diff"] == 0.0 for r in ranks)
    smoke.note(message=f"sha256 {next(iter(digests))[:16]}… on {len(ranks)} ranks", value=0.0)
