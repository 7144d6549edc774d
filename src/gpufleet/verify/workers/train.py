"""Cluster training worker: a small conv + BatchNorm model trained with DDP on every rank.

One torchrun job over all nodes x local ranks (NCCL on GPUs, gloo on CPU nodes) trains on a
deterministic synthetic data set (a fixed random teacher labels random images) with
``DistributedSampler`` and ``set_epoch``. On GPUs BatchNorm is converted to
``SyncBatchNorm`` (before DDP, optimizer built afterwards) and the step runs under AMP:
bf16 autocast where ``torch.cuda.is_bf16_supported()``, else fp16 with ``GradScaler``.
On CPU (gloo) SyncBatchNorm and CUDA autocast do not exist: plain BatchNorm, fp32; the
result says so and the report shows those two features as skipped there.

Recorded per rank (``rank<N>.json``) and, by the global rank 0, in the ResultFile (kind
``train`` or ``train-1node``): the indices each rank trained on per epoch, the global mean
loss per epoch, a SHA-256 of every rank's final parameters and their max difference to
rank 0, per-rank samples/s (epochs after the first; the first warms up) and, on GPU, the
SyncBatchNorm running statistics next to the global-batch statistics computed by plain
tensor ops. With ``--baseline-json`` (the same job on one node) the scaling efficiency is
``total samples/s here / (nnodes x total samples/s on one node)``.

The data set has ``--per-rank`` samples per rank (``world x per_rank`` in all), so
every sample is seen exactly once per epoch without DistributedSampler padding, and the
one-node job does the same work per rank (weak scaling).
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from gpufleet.results import Record, ResultFile
from gpufleet.verify.workers.common import RankEnv, base_parser, run_worker

IMAGE = (3, 8, 8)
CLASSES = 4
SYNCBN_TOL = 1e-3


def make_dataset(n: int, seed: int) -> tuple[Any, Any]:
    """(x, y): ``n`` random images (per-image channel offsets) labelled by a fixed random
    linear teacher on the channel means, which the conv + pool model can learn; the same
    on every rank."""
    import torch

    g = torch.Generator().manual_seed(seed)
    offsets = torch.randn(n, IMAGE[0], 1, 1, generator=g)
    x = torch.randn(n, *IMAGE, generator=g) + offsets
    teacher = torch.randn(CLASSES, IMAGE[0], generator=g)
    y = (offsets.reshape(n, -1) @ teacher.T).argmax(dim=1)
    return x, y


def make_model(seed: int) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(IMAGE[0], 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, CLASSES),
    )


def coverage(indices_per_rank: list[dict[str, list[int]]], n: int) -> dict[str, dict[str, int]]:
    """Per epoch: how many samples were seen 0 times, exactly once, and more than once."""
    out: dict[str, dict[str, int]] = {}
    epochs = sorted({e for r in indices_per_rank for e in r}, key=int)
    for e in epochs:
        seen = Counter(i for r in indices_per_rank for i in r.get(e, []))
        out[e] = {
            "missing": sum(1 for i in range(n) if seen[i] == 0),
            "once": sum(1 for i in range(n) if seen[i] == 1),
            "repeated": sum(1 for i in range(n) if seen[i] > 1),
            "outside": sum(1 for i in seen if not 0 <= i < n),
        }
    return out


def amp_choice(device: Any) -> tuple[str, Any]:
    """("bf16" | "fp16+GradScaler" | "off (CPU)", torch dtype or None)."""
    import torch

    if device.type != "cuda":
        return "off (CPU)", None
    if torch.cuda.is_bf16_supported():
        return "bf16", torch.bfloat16
    return "fp16+GradScaler", torch.float16


def syncbn_check(model: Any, local_x: Any, global_x: Any, device: Any) -> dict[str, Any]:
    """Reset the first SyncBatchNorm's statistics, feed each rank's slice once with momentum 1,
    and compare with the global batch's mean and unbiased variance of the same conv output."""
    import torch

    conv, bn = model[0], model[1]
    with torch.no_grad():
        feats = conv(global_x.to(device)).float()
        ref_mean = feats.mean(dim=(0, 2, 3))
        ref_var = feats.var(dim=(0, 2, 3), unbiased=True)
        bn.reset_running_stats()
        saved = bn.momentum
        bn.momentum = 1.0
        was_training = model.training
        model.train()
        bn(conv(local_x.to(device)).float())
        bn.momentum = saved
        model.train(was_training)
    mean, var = bn.running_mean.float(), bn.running_var.float()
    return {
        "running_mean": mean.cpu().tolist(),
        "running_var": var.cpu().tolist(),
        "global_mean": ref_mean.cpu().tolist(),
        "global_var": ref_var.cpu().tolist(),
        "max_diff": float(
            max((mean - ref_mean).abs().max().item(), (var - ref_var).abs().max().item())
        ),
    }


def body(env: RankEnv, backend: str, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    started = datetime.datetime.now(datetime.timezone.utc)
    n = args.per_rank * env.world_size
    x, y = make_dataset(n, args.seed)
    dataset = TensorDataset(torch.arange(n), x, y)
    sampler: Any = DistributedSampler(
        dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)

    model: Any = make_model(args.seed)
    cuda = device.type == "cuda"
    if cuda:
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    model = model.to(device)
    ddp = DDP(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)  # after conversion + DDP
    amp, amp_dtype = amp_choice(device)
    scaler = torch.amp.GradScaler("cuda", enabled=amp == "fp16+GradScaler")

    seen: dict[str, list[int]] = {}
    epoch_loss: list[float] = []
    epoch_time: list[float] = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()  # type: ignore[no-untyped-call]
        loss_sum = torch.zeros(2, dtype=torch.float64, device=device)
        dist.barrier()
        t0 = time.perf_counter()
        ids: list[int] = []
        for idx, xb_cpu, yb_cpu in loader:
            ids += [int(i) for i in idx]
            xb, yb = xb_cpu.to(device, non_blocking=True), yb_cpu.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                loss = torch.nn.functional.cross_entropy(ddp(xb).float(), yb)
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            scaler.step(opt)
            scaler.update()
            loss_sum[0] += loss.detach().double() * len(idx)
            loss_sum[1] += len(idx)
        if cuda:
            torch.cuda.synchronize(device)
        epoch_time.append(time.perf_counter() - t0)
        dist.all_reduce(loss_sum)
        epoch_loss.append(float(loss_sum[0] / loss_sum[1]))
        seen[str(epoch)] = ids

    flat = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])
    digest = hashlib.sha256(flat.cpu().numpy().tobytes()).hexdigest()
    ref = flat.clone()
    dist.broadcast(ref, src=0)
    diff = (ref - flat).abs().max().reshape(1)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)

    timed = epoch_time[1:] or epoch_time
    samples_per_s = args.per_rank * len(timed) / max(sum(timed), 1e-9)
    syncbn: dict[str, Any] | None = None
    if cuda:
        gx = x[: args.per_rank * env.world_size]
        local = gx[env.rank * args.per_rank : (env.rank + 1) * args.per_rank]
        syncbn = syncbn_check(model, local, gx, device)

    mine = {
        "rank": env.rank,
        "node_rank": env.node_rank,
        "host": socket.gethostname(),
        "device": str(device),
        "samples_per_s": samples_per_s,
        "epoch_time_s": epoch_time,
        "indices": seen,
        "param_sha256": digest,
    }
    everyone: list[Any] = [None] * env.world_size
    dist.all_gather_object(everyone, mine)
    cov = coverage([r["indices"] for r in everyone], n)
    total = sum(float(r["samples_per_s"]) for r in everyone)
    params_max_diff = float(diff.item())
    loss_down = len(epoch_loss) >= 2 and epoch_loss[-1] < epoch_loss[0]
    exactly_once = all(c["once"] == n for c in cov.values())
    syncbn_ok = syncbn is None or syncbn["max_diff"] <= SYNCBN_TOL
    baseline = _baseline(args.baseline_json)
    efficiency = (
        total / (env.nnodes * baseline["total_samples_per_s"])
        if baseline and baseline.get("total_samples_per_s")
        else None
    )
    result = {
        "ok": loss_down and params_max_diff == 0.0 and exactly_once and syncbn_ok,
        "amp": amp,
        "syncbn": syncbn,
        "epoch_loss": epoch_loss,
        "params_max_diff": params_max_diff,
        "param_sha256": digest,
        "samples_per_s": samples_per_s,
        "total_samples_per_s": total,
        "coverage": cov,
        "efficiency": efficiency,
    }
    if args.result_json and env.rank == 0:
        _write_result(
            args, env, backend, device, started, everyone, result, baseline, dataset_size=n
        )
    return result


def _baseline(path: str) -> dict[str, Any] | None:
    if not path or not Path(path).is_file():
        return None
    meta: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8")).get("meta", {})
    return meta


def _write_result(
    args: argparse.Namespace,
    env: RankEnv,
    backend: str,
    device: Any,
    started: datetime.datetime,
    everyone: list[dict[str, Any]],
    result: dict[str, Any],
    baseline: dict[str, Any] | None,
    *,
    dataset_size: int,
) -> None:
    import torch

    node = args.result_node or socket.gethostname()
    cuda = device.type == "cuda"
    where = f"{env.nnodes} node(s), world size {env.world_size}, {backend}"
    loss = result["epoch_loss"]
    digests = {r["param_sha256"] for r in everyone}
    cov = result["coverage"]
    records = [
        Record(
            name="train_loss_decreases",
            status="pass" if len(loss) >= 2 and loss[-1] < loss[0] else "fail",
            node=node,
            value=round(loss[-1], 5),
            threshold=round(loss[0], 5),
            message=f"{where}: mean loss per epoch " + " -> ".join(f"{v:.4f}" for v in loss),
            remedy="" if loss[-1] < loss[0] else "rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL",
        ),
        Record(
            name="train_params_identical",
            status="pass" if result["params_max_diff"] == 0.0 and len(digests) == 1 else "fail",
            node=node,
            value=result["params_max_diff"],
            threshold=0.0,
            message=f"{where}: {len(digests)} distinct parameter digest(s) over "
            f"{len(everyone)} ranks; max |p - p_rank0| = {result['params_max_diff']:g}",
            remedy="ranks diverged: check that every node runs the same torch and gpufleet",
        ),
        Record(
            name="train_samples_once_per_epoch",
            status="pass" if all(c["once"] == dataset_size for c in cov.values()) else "fail",
            node=node,
            value=dataset_size,
            message=f"{where}: {dataset_size} samples, per epoch "
            + "; ".join(
                f"{e}: {c['once']} once, {c['missing']} missing, {c['repeated']} repeated"
                for e, c in cov.items()
            ),
            remedy="DistributedSampler misconfigured (num_replicas/rank/set_epoch)",
        ),
    ]
    if cuda and result["syncbn"] is not None:
        d = float(result["syncbn"]["max_diff"])
        records.append(
            Record(
                name="train_syncbn_global_stats",
                status="pass" if d <= SYNCBN_TOL else "fail",
                node=node,
                value=d,
                threshold=SYNCBN_TOL,
                message=f"{where}: SyncBatchNorm running stats vs global batch, max |diff| {d:.2e}",
                remedy="SyncBatchNorm must be converted before DDP wraps the model",
            )
        )
    else:
        records.append(
            Record(
                name="train_syncbn_global_stats",
                status="skip",
                node=node,
                message=f"{where}: SyncBatchNorm needs an accelerator (torch refuses CPU "
                "tensors); plain BatchNorm trained here",
            )
        )
    records.append(
        Record(
            name="train_amp",
            status="pass" if cuda else "skip",
            node=node,
            message=f"{where}: autocast {result['amp']}"
            if cuda
            else f"{where}: CUDA AMP needs a GPU; trained in fp32",
        )
    )
    rf = ResultFile(
        kind=args.kind,
        node=node,
        mode="gpu" if cuda else "cpu",
        started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(),
        records=records,
        meta={
            "backend": backend,
            "world_size": env.world_size,
            "nnodes": env.nnodes,
            "nproc_per_node": env.local_world_size,
            "device_type": device.type,
            "gpu_name": str(torch.cuda.get_device_name(device)) if cuda else None,
            "amp": result["amp"],
            "syncbn": result["syncbn"] is not None,
            "epochs": args.epochs,
            "per_rank": args.per_rank,
            "batch": args.batch,
            "dataset_size": dataset_size,
            "epoch_loss": loss,
            "params_max_diff": result["params_max_diff"],
            "coverage": cov,
            "ranks": [
                {k: r[k] for k in ("rank", "node_rank", "host", "device", "samples_per_s")}
                | {"indices": r["indices"], "param_sha256": r["param_sha256"]}
                for r in everyone
            ],
            "total_samples_per_s": result["total_samples_per_s"],
            "baseline_total_samples_per_s": baseline.get("total_samples_per_s")
            if baseline
            else None,
            "baseline_world_size": baseline.get("world_size") if baseline else None,
            "efficiency": result["efficiency"],
            "efficiency_formula": "total samples/s / (nnodes x one-node total samples/s)",
            "torch": torch.__version__,
        },
    )
    rf.write(args.result_json)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--per-rank", type=int, default=64, help="samples per rank and epoch")
    p.add_argument("--batch", type=int, default=16, help="samples per rank and step")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--result-node", default="", help="node name in the result file")
    p.add_argument("--result-json", default="", help="ResultFile written by global rank 0")
    p.add_argument("--kind", default="train", help="ResultFile kind")
    p.add_argument(
        "--baseline-json", default="", help="ResultFile of the same job on one node (efficiency)"
    )
    return run_worker("train", body, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
