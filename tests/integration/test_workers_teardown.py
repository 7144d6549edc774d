"""Issue 17 item 1: no gloo process group outlives destroy_process_group in the workers.

The syncbn worker's CPU path used to call ``DDP(model)`` to record its refusal; the
half-built DDP kept the group referenced past ``destroy_process_group()``, so a live gloo
group was torn down at interpreter exit, racing the peer's exit (SIGABRT after results).
One rank, gloo on 127.0.0.1: the group's Python reference count after teardown must be
what it is when no worker body ran. ``tests/bench/bench_teardown.py`` measures the 2-rank rate.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from gpufleet.node.netprobe import free_port  # noqa: E402
from gpufleet.verify.workers import syncbn  # noqa: E402
from gpufleet.verify.workers.common import RankEnv, teardown  # noqa: E402


@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], object]]:
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    # Test files that import ansible in this pytest process (test_collection_filters) leave
    # sys.intern replaced by a callable object, which torch._dynamo (imported lazily by DDP)
    # refuses: the test runs under the real function, whatever ran before it.
    monkeypatch.setattr(sys, "intern", getattr(sys.intern, "unpatched_implementation", sys.intern))

    def start() -> object:
        os.environ["MASTER_PORT"] = str(free_port())
        dist.init_process_group("gloo", rank=0, world_size=1)
        return dist.group.WORLD

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


def _refs_after(one_rank: Callable[[], object], run_body: bool) -> int:
    pg = one_rank()
    if run_body:
        args = argparse.Namespace(channels=4, batch=8, seed=1, tol=1e-4)
        out = syncbn.body(RankEnv(0, 0, 1, 1, 0), "gloo", torch.device("cpu"), args)
        assert out["ok"], out
        assert "only work with GPU modules" in str(out["ddp_error"])
    assert teardown(synchronize=True) == {"destroyed": True}
    assert not dist.is_initialized()
    return sys.getrefcount(pg)


def test_syncbn_body_leaves_no_reference_to_the_group(one_rank: Callable[[], object]) -> None:
    control = _refs_after(one_rank, run_body=False)
    after_body = _refs_after(one_rank, run_body=True)
    assert after_body == control, (
        f"the syncbn body left {after_body - control} references to the destroyed gloo group"
    )


def test_half_built_ddp_is_what_kept_the_group(one_rank: Callable[[], object]) -> None:
    """The cause, shown on torch itself: a failed DDP() keeps the group past destroy."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    control = _refs_after(one_rank, run_body=False)
    pg = one_rank()
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(4))
    with pytest.raises(ValueError, match="only work with GPU modules"):
        DDP(model)
    teardown(synchronize=True)
    leaked = sys.getrefcount(pg) - control
    if leaked == 0:
        pytest.skip("this torch frees a half-built DDP's references: the old path is safe here")
    assert leaked > 0


def test_ddp_refusal_check_matches_torch_message() -> None:
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torch.nn.BatchNorm1d(4))
    with pytest.raises(ValueError, match="SyncBatchNorm layers only work with GPU modules"):
        syncbn.ddp_refuses_cpu_syncbn(model)
    syncbn.ddp_refuses_cpu_syncbn(torch.nn.BatchNorm1d(4))  # no SyncBatchNorm: no error
