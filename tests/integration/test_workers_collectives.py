"""gpufleet.verify.workers.collectives on this CPU machine: torchrun with 2 gloo ranks, every
collective checked and swept; busbw recomputed here from each row's size and time with
nccl-tests' factor; and a collective the backend refuses is a skip with its words (one gloo
rank in this process, the collective made to refuse as a backend that lacks it does)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from gpufleet.verify import collective_ops as coll
from local_nodes import torchrun_worker

pytestmark = pytest.mark.slow
FACTOR_2 = {
    "all_gather": 0.5,
    "reduce_scatter": 0.5,
    "alltoall": 0.5,
    "broadcast": 1.0,
    "sendrecv": 1.0,
}


@pytest.fixture(scope="module")
def launched(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("coll")
    return torchrun_worker(
        repo_root, "gpufleet.verify.workers.collectives", out / "collectives.json",
        f"--out-dir={out / 'ranks'}", "--sizes=16K,256K", "--iters=3",
    )  # fmt: skip


def test_every_collective_is_right(launched: dict[str, Any]) -> None:
    recs = {r["name"]: r for r in launched["records"]}
    assert sorted(recs) == sorted(f"collective_{op}" for op in coll.OPS)
    assert {r["status"] for r in recs.values()} == {"pass"}, recs
    assert launched["meta"]["busbw_factors"] == FACTOR_2


def test_busbw_is_bytes_over_time_times_the_factor(launched: dict[str, Any]) -> None:
    rows = launched["bandwidth"]
    assert {(r["op"], r["size_bytes"]) for r in rows} == {
        (op, s) for op in coll.OPS for s in (16384, 262144)
    }
    for r in rows:
        algbw = r["size_bytes"] / (r["time_us"] / 1e6) / 1e9
        assert r["algbw"] == pytest.approx(algbw, rel=1e-3), r
        assert r["busbw"] == pytest.approx(algbw * FACTOR_2[r["op"]], rel=1e-3), r
        assert r["wrong"] == 0 and r["world_size"] == 2 and r["backend"] == "gloo"


def test_a_collective_the_backend_lacks_is_a_skip_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)  # type: ignore[attr-defined]
    dist.init_process_group(
        "gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    try:

        def lacks(*_: Any, **__: Any) -> None:
            raise RuntimeError("ProcessGroupGloo does not support alltoall_base")

        monkeypatch.setattr(dist, "all_to_all_single", lacks)
        res = coll.run_op(
            "alltoall",
            [4096],
            dtype="float32",
            warmup=0,
            iters=1,
            device=torch.device("cpu"),
            backend="gloo",
        )
        assert res.skipped == "ProcessGroupGloo does not support alltoall_base" and not res.rows
        rec = coll.op_record(res, "n1", 1, "gloo")
        assert rec.status == "skip" and "gloo does not run it here" in rec.message
        one = coll.run_op(
            "sendrecv",
            [4096],
            dtype="float32",
            warmup=0,
            iters=1,
            device=torch.device("cpu"),
            backend="gloo",
        )
        assert one.skipped == "one rank: nothing to send"
        ok = coll.run_op(
            "broadcast",
            [4096],
            dtype="float32",
            warmup=0,
            iters=1,
            device=torch.device("cpu"),
            backend="gloo",
        )
        assert ok.wrong == 0 and len(ok.rows) == 1 and not ok.skipped
    finally:
        dist.destroy_process_group()
