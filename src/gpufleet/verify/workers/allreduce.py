"""All-reduce worker: exact correctness of the rank+1 pattern, then a size sweep.

Every rank writes rank<N>.json (correctness, host, device). Rank 0 also writes the sweep
rows. With ``--result-json`` the local rank 0 of every node writes a ResultFile (kind
"allreduce") for the cluster report: correctness and the busbw gate as Records, the rows
as bandwidth (rank 0's node only carries the rows). Time per size = max over ranks of the
per-iteration mean. Every rank also records its raw per-iteration timings, byte counts and
the min/max of the reduced buffer ("raw"; rank 0's ResultFile has all ranks' in meta.raw),
so that tests recompute the rows without bench's formulas.
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import socket
import sys
from pathlib import Path
from typing import Any

from gpufleet import units
from gpufleet.node import nccl_transport as nccltransport
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.verify import bandwidth as bench
from gpufleet.verify.workers.common import RankEnv, base_parser, run_worker


def body(env: RankEnv, backend: str, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    started = datetime.datetime.now(datetime.timezone.utc)
    wrong = bench.check_allreduce(device, env.world_size, env.rank)
    hosts: list[Any] = [None] * env.world_size
    dist.all_gather_object(
        hosts, {"rank": env.rank, "host": socket.gethostname(), "device": str(device)}
    )
    wrong_t = torch.tensor([wrong], dtype=torch.int64, device=device)
    dist.all_reduce(wrong_t)
    total_wrong = int(wrong_t.item())
    tag = f"{args.kind} {args.result_node or socket.gethostname()} rank {env.rank}"

    def progress(row: BandwidthRow) -> None:
        # one line per size from each node's first rank: the supervise log shows how far
        # the sweep got when a run is stopped
        if env.local_rank == 0:
            print(
                f"{tag}: {units.human_size(row.size_bytes)} done, busbw {row.busbw:g} GB/s",
                flush=True,
            )

    if env.local_rank == 0:
        print(f"{tag}: correctness {total_wrong} wrong; sweeping {args.sizes}", flush=True)
    raw: list[dict[str, Any]] = []
    rows = bench.run_sweep(
        units.parse_sizes(args.sizes),
        dtype=args.dtype,
        warmup=args.warmup,
        iters=args.iters,
        device=device,
        backend=backend,
        progress=progress,
        raw=raw,
    )
    # every rank's raw timings, so that a reader recomputes the rows without bench's formulas
    raws: list[Any] = [None] * env.world_size
    dist.all_gather_object(raws, {"rank": env.rank, "sizes": raw})
    gpu = str(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    threshold = bench.lookup_threshold(
        gpu,
        env.world_size,
        env.nnodes,
        fabric=args.fabric,
        table=bench.load_table(args.bandwidth_table or None),
        override=args.busbw_min if args.busbw_min > 0 else None,
    )
    node = args.result_node or socket.gethostname()
    correct = Record(
        name="allreduce_correctness",
        status="pass" if total_wrong == 0 else "fail",
        node=node,
        value=total_wrong,
        threshold=0,
        message=(
            f"sum of rank+1 over {env.world_size} ranks = {bench.expected_sum(env.world_size)}: "
            f"{total_wrong} wrong elements over all ranks"
        ),
        remedy=""
        if total_wrong == 0
        else (
            "wrong all-reduce results: run the node checks (ECC, row remapping) on every "
            "node of this run; NCCL_DEBUG=INFO"
        ),
    )
    verdict = bench.gate(rows, threshold, node)
    if args.result_json and env.local_rank == 0:
        # every rank finished its NCCL init (and logged it) before the sweep could complete
        transport = dataclasses.replace(
            nccltransport.node_record(Path(args.out_dir), backend), node=node
        )
        rf = ResultFile(
            kind=args.kind,
            node=node,
            mode="gpu" if device.type == "cuda" else "cpu",
            started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            duration_s=(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(),
            records=[correct, verdict, transport] if env.rank == 0 else [correct, transport],
            bandwidth=rows if env.rank == 0 else [],
            meta={
                "backend": backend,
                "world_size": env.world_size,
                "nnodes": env.nnodes,
                "node_rank": env.node_rank,
                "gpu_name": gpu,
                "threshold": threshold.value,
                "threshold_source": threshold.source,
                "time": "max over ranks of the per-iteration mean",
                "busbw_factor": bench.busbw_factor(env.world_size),
                # every rank on rank 0's node, this node's own ranks elsewhere: a list of
                # all ranks on every node grows as nodes squared (1000 x 8 GPUs: 8000 ranks
                # in each of 1000 files)
                "ranks": hosts
                if env.rank == 0
                else [h for h in hosts if h and h.get("host") == socket.gethostname()],
                "raw": raws if env.rank == 0 else [],
                "torch": torch.__version__,
            },
        )
        rf.write(args.result_json)
    return {
        "ok": total_wrong == 0 and verdict.status != "fail",
        "wrong": wrong,
        "total_wrong": total_wrong,
        "expected_sum": bench.expected_sum(env.world_size),
        "ranks": hosts,
        "rows": [r.to_dict() for r in rows] if env.rank == 0 else [],
        "raw": raw,
        "threshold": threshold.value,
        "threshold_source": threshold.source,
        "gate": verdict.to_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--sizes", default="", help="comma list, e.g. 1M,16M,128M,1G")
    p.add_argument("--dtype", default="float32", choices=sorted(bench.DTYPE_SIZES))
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--busbw-min", type=float, default=0.0, help="gate in GB/s (0 = table)")
    p.add_argument("--bandwidth-table", default="", help="user table, same layout as shipped")
    p.add_argument("--fabric", default="", help="fabric name for cluster table rows")
    p.add_argument("--result-node", default="", help="node name in the result file")
    p.add_argument("--result-json", default="", help="ResultFile written by local rank 0")
    p.add_argument("--kind", default="allreduce", help="ResultFile kind")
    p.add_argument(
        "--no-nccl-transport",
        action="store_true",
        help="do not set NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET) to record the transport",
    )
    args = p.parse_args(argv)
    if not args.no_nccl_transport:  # before init: NCCL reads these at its first communicator
        os.environ.update(nccltransport.debug_env(Path(args.out_dir)))
    if not args.sizes:
        import torch

        args.sizes = (
            bench.DEFAULT_GPU_SIZES if torch.cuda.is_available() else (bench.DEFAULT_CPU_SIZES)
        )
    return run_worker("allreduce", body, args)


if __name__ == "__main__":
    sys.exit(main())
