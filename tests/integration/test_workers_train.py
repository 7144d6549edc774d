"""gpufleet.verify.workers.train on this CPU machine: torchrun with 2 gloo ranks, once as the one-node
baseline and once with it, then the report sections. The properties are recomputed here from
the raw per-rank data the worker recorded (indices, digests, per-rank samples/s), not read
from the worker's own verdicts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpufleet import report
from gpufleet.report import training
from gpufleet.verify.workers.train import coverage
from local_nodes import torchrun_worker

pytestmark = pytest.mark.slow


def _launch(repo: Path, out: Path, kind: str, *extra: str) -> dict[str, Any]:
    return torchrun_worker(
        repo, "gpufleet.verify.workers.train", out / "n1" / f"{kind}.json",
        f"--out-dir={out / (kind + '-ranks')}", f"--kind={kind}",
        "--epochs=3", "--per-rank=32", "--batch=8", *extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("train")
    (out / "n1").mkdir()
    base = _launch(repo_root, out, "train-1node")
    train = _launch(repo_root, out, "train", f"--baseline-json={out / 'n1' / 'train-1node.json'}")
    return out, {"base": base, "train": train}


def test_every_sample_once_per_epoch_from_the_recorded_indices(
    runs: tuple[Path, dict[str, Any]],
) -> None:
    meta = runs[1]["train"]["meta"]
    n = meta["dataset_size"]
    assert n == 2 * 32
    ranks = meta["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    for epoch in ("0", "1", "2"):
        seen = Counter(i for r in ranks for i in r["indices"][epoch])
        assert sorted(seen) == list(range(n)), f"epoch {epoch}"
        assert set(seen.values()) == {1}, f"epoch {epoch}: repeats"
    # set_epoch reshuffles: rank 0's order differs between epochs
    assert ranks[0]["indices"]["0"] != ranks[0]["indices"]["1"]


def test_loss_down_params_identical_and_honest_skips(runs: tuple[Path, dict[str, Any]]) -> None:
    rf = runs[1]["train"]
    meta = rf["meta"]
    assert meta["epoch_loss"][-1] < meta["epoch_loss"][0]
    assert len({r["param_sha256"] for r in meta["ranks"]}) == 1
    status = {r["name"]: r["status"] for r in rf["records"]}
    assert status["train_loss_decreases"] == "pass"
    assert status["train_params_identical"] == "pass"
    assert status["train_samples_once_per_epoch"] == "pass"
    # CPU: SyncBatchNorm and CUDA AMP cannot run, so they are skipped, never passed
    assert status["train_syncbn_global_stats"] == "skip"
    assert status["train_amp"] == "skip"
    assert meta["syncbn"] is False and meta["amp"] == "off (CPU)"
    assert (meta["world_size"], meta["nnodes"], meta["backend"]) == (2, 1, "gloo")


def test_efficiency_recomputed_from_per_rank_throughput(runs: tuple[Path, dict[str, Any]]) -> None:
    base, train = runs[1]["base"]["meta"], runs[1]["train"]["meta"]
    assert base["efficiency"] is None  # no baseline for the baseline
    total = sum(r["samples_per_s"] for r in train["ranks"])
    base_total = sum(r["samples_per_s"] for r in base["ranks"])
    assert all(r["samples_per_s"] > 0 for r in train["ranks"])
    assert train["total_samples_per_s"] == pytest.approx(total)
    assert train["baseline_total_samples_per_s"] == pytest.approx(base_total)
    assert train["efficiency"] == pytest.approx(total / (1 * base_total))


def test_report_shows_the_training_record_and_where_features_ran(
    runs: tuple[Path, dict[str, Any]],
) -> None:
    out = runs[0]
    s = report.collect(out)
    data = report.to_json(s)
    t = data["training"]
    assert t is not None
    assert (t["nnodes"], t["world_size"], t["device_type"]) == (1, 2, "cpu")
    assert t["efficiency"] == pytest.approx(runs[1]["train"]["meta"]["efficiency"])
    feats = {f["feature"]: f for f in data["features"]}
    assert feats["DDP training (cluster)"]["ran"] == [
        {"node": "1 nodes", "mode": "cpu", "world_size": 2}
    ]
    syncbn = feats["SyncBatchNorm (cluster training)"]
    assert syncbn["ran"] == []
    assert "needs an accelerator" in syncbn["skipped"][0]["reason"]
    text = report.table(s)
    assert "cluster training: 1 nodes, world size 2, gloo (cpu)" in text
    assert "scaling efficiency" in text
    md = report.render_markdown(s)
    assert "## Cluster training" in md and "## Where each feature ran" in md


def test_coverage_counts_missing_repeated_and_outside() -> None:
    cov = coverage([{"0": [0, 1, 1]}, {"0": [3, 7]}], 4)
    assert cov == {"0": {"missing": 1, "once": 2, "repeated": 1, "outside": 1}}
    assert coverage([{"0": [1, 0]}, {"0": [3, 2]}], 4)["0"]["once"] == 4


def test_training_lines_without_a_baseline() -> None:
    t = {
        "nnodes": 1,
        "world_size": 1,
        "backend": "nccl",
        "device_type": "cuda",
        "amp": "bf16",
        "syncbn": True,
        "epoch_loss": [1.0, 0.5],
        "params_max_diff": 0.0,
        "statuses": {"train_loss_decreases": "pass"},
        "ranks": [{"rank": 0, "host": "h", "device": "cuda:0", "samples_per_s": 10.0}],
        "total_samples_per_s": 10.0,
        "baseline_total_samples_per_s": None,
        "efficiency": None,
        "efficiency_formula": "x",
    }
    lines = training.training_lines(t)
    assert any("no one-node baseline" in line for line in lines)
    assert training.training_lines(None) == []
