"""The yardstick of `make bench` (tests/bench/bench_cluster.py), copied to each node and launched
there with torchrun by hand, the way an admin would without gpufleet.

--mode bare      a plain timed ``all_reduce`` loop per size, no gpufleet code at all
                 (the denominator of the verify-overhead ratio);
--mode fidelity  in the same process group, per size and repetition, the bare loop and
                 ``gpufleet.verify.bandwidth.run_sweep`` one after the other (order alternating), so
                 gpufleet's busbw can be compared with a bare measurement taken under the
                 same conditions.

Time per size is the per-iteration mean of the timed loop, max over ranks; busbw is
nccl-tests' ``size / time * 2(n-1)/n``. Rank 0 writes --out (JSON) and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def parse_sizes(text: str) -> list[int]:
    out = []
    for item in text.split(","):
        m = re.fullmatch(r"(\d+)([KMG]?)", item.strip().upper())
        if not m:
            raise SystemExit(f"bad size {item!r}")
        out.append(int(m.group(1)) * UNITS[m.group(2)])
    return sorted(set(out))


def bare_time(size: int, warmup: int, iters: int) -> float:
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    local = (time.perf_counter() - t0) / iters
    t = torch.tensor([local], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def busbw(size: int, seconds: float, world: int) -> float:
    return size / seconds / 1e9 * 2 * (world - 1) / world


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=("bare", "fidelity"), default="bare")
    p.add_argument("--sizes", default="4K,64K,1M,8M")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--out", default="")
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    world, rank = dist.get_world_size(), dist.get_rank()
    rows: list[dict[str, Any]] = []
    sizes = parse_sizes(args.sizes)
    if args.mode == "bare":
        for size in sizes:
            t = bare_time(size, args.warmup, args.iters)
            rows.append({"size": size, "who": "bare", "time_s": t, "busbw": busbw(size, t, world)})
    else:
        from gpufleet.verify import bandwidth as bench  # only the fidelity mode uses gpufleet

        for rep in range(args.reps):
            for size in sizes:
                order = ("bare", "gpufleet") if rep % 2 == 0 else ("gpufleet", "bare")
                for who in order:
                    if who == "bare":
                        t = bare_time(size, args.warmup, args.iters)
                        bw = busbw(size, t, world)
                    else:
                        row = bench.run_sweep(
                            [size],
                            dtype="float32",
                            warmup=args.warmup,
                            iters=args.iters,
                            device=torch.device("cpu"),
                            backend="gloo",
                        )[0]
                        t, bw = row.time_us / 1e6, row.busbw
                    rows.append({"rep": rep, "size": size, "who": who, "time_s": t, "busbw": bw})
    dist.barrier()  # no rank closes its connections while a peer is still in a collective
    dist.destroy_process_group()
    if rank == 0:
        text = json.dumps({"mode": args.mode, "world_size": world, "rows": rows}, indent=1)
        if args.out:
            Path(args.out).write_text(text + "\n")
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
