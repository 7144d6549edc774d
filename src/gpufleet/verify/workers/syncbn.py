"""SyncBatchNorm worker: convert_sync_batchnorm before DDP, optimizer built afterwards.

Every rank builds the same global batch (fixed seed) and feeds its own slice. After one
training step the running statistics must be identical on all ranks and equal to those a
plain BatchNorm computes on the whole global batch.

CPU/gloo (torch 2.13): ``DistributedDataParallel`` refuses a module holding SyncBatchNorm
on CPU ("SyncBatchNorm layers only work with GPU modules") and the layer alone refuses CPU
input ("SyncBatchNorm expected input tensor to be on GPU or XPU or privateuseone"). The
worker records both errors (DDP's through its own check, see ``ddp_refuses_cpu_syncbn``)
and runs nothing else: SyncBatchNorm needs an accelerator, so the suite reports skip with
those errors as the reason (and fails if torch starts to accept CPU, so that the suite is
updated).
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from gpufleet.verify.workers.common import RankEnv, base_parser, run_worker

CPU_ERROR_FRAGMENT = "expected input tensor to be on GPU"
CPU_DDP_ERROR = "SyncBatchNorm layers only work with GPU modules"


def ddp_refuses_cpu_syncbn(model: Any) -> None:
    """Run DDP's own SyncBatchNorm device check on ``model`` for a CPU module.

    Not ``DDP(model)``: its ``__init__`` runs two collectives and builds its Reducer and
    Logger before that check raises, and the half-built DDP keeps the process group
    referenced past ``destroy_process_group()`` and ``gc.collect()``. The gloo group (its
    threads and TCP pairs) then lives until interpreter finalization, racing the peer
    rank's exit: the intermittent SIGABRT after both ranks reported (issue 17). The
    check itself is ``DistributedDataParallel._passing_sync_batchnorm_handle``.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    probe = SimpleNamespace(device_type="cpu", logger=None)
    probe._log_and_throw = functools.partial(DDP._log_and_throw, probe)  # type: ignore[arg-type]
    DDP._passing_sync_batchnorm_handle(probe, model)  # type: ignore[arg-type,no-untyped-call]


def _refusal(call: Callable[[], object], fragment: str) -> str | None:
    """The ValueError of ``call`` that holds ``fragment`` (another one is raised), or None
    when ``call`` runs."""
    try:
        call()
    except ValueError as exc:
        if fragment not in str(exc):
            raise
        return str(exc)
    return None


def body(env: RankEnv, backend: str, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    c, per_rank, mom = args.channels, args.batch, 0.1
    g = torch.Generator().manual_seed(args.seed)
    # different mean/scale per channel so wrong statistics cannot pass by accident
    global_x = torch.randn(env.world_size * per_rank, c, generator=g) * torch.linspace(
        0.5, 3.0, c
    ) + torch.arange(c, dtype=torch.float32)
    local_x = global_x[env.rank * per_rank : (env.rank + 1) * per_rank]

    ref = torch.nn.BatchNorm1d(c, momentum=mom)
    ref.train()
    ref(global_x)
    assert ref.running_mean is not None
    assert ref.running_var is not None
    ref_mean, ref_var = ref.running_mean.clone(), ref.running_var.clone()

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(c, momentum=mom))
    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    converted = type(model[0]).__name__
    model = model.to(device)
    out: dict[str, Any] = {
        "converted_to": converted,
        "ref_mean": ref_mean.tolist(),
        "ref_var": ref_var.tolist(),
    }
    if device.type == "cuda":
        ddp = DDP(model, device_ids=[device.index])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)  # built after conversion + DDP
        ddp.train()  # type: ignore[no-untyped-call]
        y = ddp(local_x.to(device))
        y.square().mean().backward()
        opt.step()
        mean = model[0].running_mean.detach()
        var = model[0].running_var.detach()
        out["path"] = "syncbn"
    else:
        # torch 2.13 on CPU: DDP refuses the module, and the layer alone refuses CPU input.
        out["ddp_error"] = _refusal(lambda: ddp_refuses_cpu_syncbn(model), CPU_DDP_ERROR)
        out["forward_error"] = _refusal(lambda: model.train()(local_x), CPU_ERROR_FRAGMENT)
        out["path"] = "unsupported-on-cpu"
        out["ok"] = out["ddp_error"] is not None and out["forward_error"] is not None
        return out

    mean_cpu, var_cpu = mean.float().cpu(), var.float().cpu()
    gathered = [torch.zeros(2 * c, device=device) for _ in range(env.world_size)]
    dist.all_gather(gathered, torch.cat([mean_cpu, var_cpu]).to(device))
    rank_diff = max(float((t.cpu() - gathered[0].cpu()).abs().max()) for t in gathered)
    ref_diff = float(max((mean_cpu - ref_mean).abs().max(), (var_cpu - ref_var).abs().max()))
    out.update(
        running_mean=mean_cpu.tolist(),
        running_var=var_cpu.tolist(),
        rank_max_diff=rank_diff,
        ref_max_diff=ref_diff,
        ok=rank_diff == 0.0 and ref_diff <= args.tol,
    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--channels", type=int, default=8)
    p.add_argument("--batch", type=int, default=32, help="samples per rank")
    p.add_argument("--tol", type=float, default=1e-4)
    return run_worker("syncbn", body, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
