"""What every worker shares: rank environment, backend choice, bounded init, per-rank JSON."""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import datetime
import gc
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.results import write_json_atomic


@dataclass(frozen=True)
class RankEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def rank_env() -> RankEnv:
    """The ranks torchrun exported; a clear error when run outside torchrun."""
    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
    except KeyError:
        raise SystemExit(
            "ERROR: RANK/WORLD_SIZE not set: start workers with "
            "python -m torch.distributed.run (torchrun), not directly"
        ) from None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    node_rank = int(os.environ.get("GROUP_RANK", "0"))
    return RankEnv(rank, local_rank, world, local_world, node_rank)


def choose_backend(env: RankEnv, requested: str = "auto") -> tuple[str, Any]:
    """(backend, device): NCCL with one CUDA device per local rank, else gloo on CPU."""
    import torch

    if requested not in ("auto", "nccl", "gloo"):
        raise SystemExit(f"ERROR: --backend must be auto, nccl or gloo, got {requested!r}")
    has_gpu = torch.cuda.is_available() and torch.cuda.device_count() >= env.local_world_size
    if requested == "nccl" and not has_gpu:
        raise SystemExit(
            f"ERROR: --backend nccl needs {env.local_world_size} CUDA devices on this node, "
            f"found {torch.cuda.device_count() if torch.cuda.is_available() else 0}"
        )
    if requested == "nccl" or (requested == "auto" and has_gpu):
        torch.cuda.set_device(env.local_rank)
        return "nccl", torch.device("cuda", env.local_rank)
    return "gloo", torch.device("cpu")


def init(env: RankEnv, backend: str, device: Any, timeout_s: float) -> None:
    """init_process_group with an explicit timeout (defaults are 10/30 min)."""
    import torch.distributed as dist

    kwargs: dict[str, Any] = {
        "backend": backend,
        "timeout": datetime.timedelta(seconds=timeout_s),
        "rank": env.rank,
        "world_size": env.world_size,
    }
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)


def teardown(*, synchronize: bool) -> dict[str, Any]:
    """Destroy the process group so that no rank exits with a live gloo group.

    ``synchronize`` (the body succeeded): a barrier first, so no rank closes its
    connections while a peer is still inside a collective. Not on the error path: a
    failed peer may never reach it. Garbage is collected before and after, so nothing
    unreachable keeps the group (its threads and sockets) alive until interpreter exit.
    """
    import torch.distributed as dist

    out: dict[str, Any] = {}
    try:
        gc.collect()
        if synchronize:
            dist.barrier()
        dist.destroy_process_group()
        gc.collect()
        out["destroyed"] = True
    except Exception as exc:
        out["destroy_error"] = repr(exc)
    return out


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out-dir", required=True, help="directory for rank<N>.json")
    p.add_argument("--timeout", type=float, default=60.0, help="collective timeout, seconds")
    p.add_argument("--backend", default="auto", help="auto (default), nccl or gloo")
    p.add_argument("--seed", type=int, default=1234)
    return p


def device_name(device: Any) -> str | None:
    import torch

    if getattr(device, "type", "") == "cuda":
        return str(torch.cuda.get_device_name(device))
    return None


def run_worker(
    name: str,
    body: Callable[[RankEnv, str, Any, argparse.Namespace], dict[str, Any]],
    args: argparse.Namespace,
) -> int:
    """Init, run ``body``, write rank<N>.json (also on error), destroy the group."""
    import torch.distributed as dist

    env = rank_env()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    result: dict[str, Any] = {
        "worker": name,
        "rank": env.rank,
        "local_rank": env.local_rank,
        "world_size": env.world_size,
        "local_world_size": env.local_world_size,
        "nnodes": env.nnodes,
        "node_rank": env.node_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "ok": False,
    }
    rc = 1
    try:
        backend, device = choose_backend(env, args.backend)
        result.update(backend=backend, device=str(device), gpu_name=device_name(device))
        init(env, backend, device, args.timeout)
        body_result = body(env, backend, device, args)
        result.update(body_result)
        result["ok"] = bool(body_result.get("ok", True))
        rc = 0 if result["ok"] else 1
    except SystemExit as exc:
        result["error"] = str(exc.code)
        rc = 2
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc(limit=8)
        print(f"ERROR rank {env.rank} ({result['host']}): {result['error']}", file=sys.stderr)
        rc = 1
    finally:
        if dist.is_initialized():
            result.update(teardown(synchronize=rc == 0))
        result["duration_s"] = round(time.time() - started, 3)
        write_json_atomic(out / f"rank{env.rank}.json", result)
    return rc
