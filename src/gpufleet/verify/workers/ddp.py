"""DDP worker: DistributedSampler properties and a few optimizer steps.

Writes per rank: the sampler's indices for epochs 0 and 1 (the suite checks disjoint,
covering, and that set_epoch reshuffles), the loss per step, and a SHA-256 of the final
parameters plus an in-worker cross-rank comparison (all_gather of a checksum).
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import hashlib
import sys
from typing import Any

from gpufleet.verify.workers.common import RankEnv, base_parser, run_worker


def body(env: RankEnv, backend: str, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    g = torch.Generator().manual_seed(args.seed)
    n = args.dataset_size
    x = torch.randn(n, 16, generator=g)
    w_true = torch.randn(16, 1, generator=g)
    y = x @ w_true + 0.01 * torch.randn(n, 1, generator=g)
    dataset = TensorDataset(torch.arange(n), x, y)

    sampler: Any = DistributedSampler(
        dataset,
        num_replicas=env.world_size,
        rank=env.rank,
        shuffle=True,
        seed=args.seed,
        drop_last=False,
    )
    epochs: dict[str, list[int]] = {}
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        epochs[str(epoch)] = [int(i) for i in sampler]

    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
    ).to(device)
    ids = [device.index] if device.type == "cuda" else None
    ddp = DDP(model, device_ids=ids)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)

    losses: list[float] = []
    steps = 0
    epoch = 0
    while steps < args.steps:
        sampler.set_epoch(epoch)
        for _idx, xb_cpu, yb_cpu in loader:
            xb, yb = xb_cpu.to(device), yb_cpu.to(device)
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
            # the mean loss over ranks, so every rank sees the same curve
            lt = loss.detach().clone()
            dist.all_reduce(lt)
            losses.append(float(lt.item()) / env.world_size)
            steps += 1
            if steps >= args.steps:
                break
        epoch += 1

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    # cross-rank: max |p - p_rank0| after broadcasting rank 0's parameters
    ref = flat.clone().to(device)
    dist.broadcast(ref, src=0)
    diff = torch.tensor([(ref.cpu() - flat).abs().max().item()], device=device)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    params_max_diff = float(diff.item())
    k = max(1, len(losses) // 4)
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    ok = params_max_diff == 0.0 and last < first
    return {
        "ok": ok,
        "sampler": {"dataset_size": n, "epochs": epochs},
        "losses": losses,
        "loss_first": first,
        "loss_last": last,
        "param_sha256": digest,
        "params_max_diff": params_max_diff,
        "steps": steps,
    }


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dataset-size", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    return run_worker("ddp", body, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
