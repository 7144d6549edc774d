"""Collectives worker: all_gather, reduce_scatter, alltoall, broadcast and sendrecv across
every rank of the run, each checked for exact results, then swept over sizes with
nccl-tests' busbw factor (gpufleet.verify.collective_ops).

With ``--result-json`` the local rank 0 of every node writes a ResultFile (kind
"collectives"): global rank 0's node holds a record per collective (pass, fail, or skip
with the backend's words when it lacks one) and the bandwidth rows (``op`` names the
collective); every other node a record that it took part. Every rank writes rank<N>.json.
"""

# ruff: noqa: PLC0415  (torch is imported lazily on purpose)

from __future__ import annotations

import argparse
import datetime
import socket
import sys
from typing import Any

from gpufleet import units
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.verify import bandwidth as bench
from gpufleet.verify import collective_ops as coll
from gpufleet.verify.workers.common import RankEnv, base_parser, run_worker

#: CPU sizes when none are given: the testbed's default run stays seconds long
DEFAULT_CPU_SIZES = "64K,1M"


def body(env: RankEnv, backend: str, device: Any, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    started = datetime.datetime.now(datetime.timezone.utc)
    node = args.result_node or socket.gethostname()
    tag = f"{args.kind} {node} rank {env.rank}"

    def progress(row: BandwidthRow) -> None:
        if env.local_rank == 0:
            print(
                f"{tag}: {row.op} {units.human_size(row.size_bytes)} busbw {row.busbw:g} GB/s",
                flush=True,
            )

    sizes = units.parse_sizes(args.sizes)
    results = []
    for op in [o.strip() for o in args.ops.split(",") if o.strip()]:
        res = coll.run_op(
            op,
            sizes,
            dtype=args.dtype,
            warmup=args.warmup,
            iters=args.iters,
            device=device,
            backend=backend,
            progress=progress,
        )
        if env.local_rank == 0:
            why = f"skipped ({res.skipped})" if res.skipped else res.error or f"{res.wrong} wrong"
            print(f"{tag}: {op} {why}", flush=True)
        results.append(res)
    records = [coll.op_record(r, node, env.world_size, backend) for r in results]
    if args.result_json and env.local_rank == 0:
        mine = (
            records
            if env.rank == 0
            else [
                Record(
                    "collectives_joined",
                    "pass",
                    node=node,
                    message=f"{node} took part in the collectives of {env.world_size} ranks "
                    "(the verdicts are on the first node's result)",
                )
            ]
        )
        ResultFile(
            kind=args.kind,
            node=node,
            mode="gpu" if device.type == "cuda" else "cpu",
            started=started.strftime("%Y-%m-%dT%H:%M:%SZ"),
            duration_s=(datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(),
            records=mine,
            bandwidth=[row for r in results for row in r.rows] if env.rank == 0 else [],
            meta={
                "backend": backend,
                "world_size": env.world_size,
                "nnodes": env.nnodes,
                "node_rank": env.node_rank,
                "ops": [r.op for r in results],
                "skipped": {r.op: r.skipped for r in results if r.skipped},
                "busbw_factors": {
                    r.op: round(bench.busbw_factor(env.world_size, r.op), 6) for r in results
                },
                "time": "max over ranks of the per-iteration mean",
                "gpu_name": str(torch.cuda.get_device_name(device))
                if device.type == "cuda"
                else None,
                "torch": torch.__version__,
            },
        ).write(args.result_json)
    failed = [r.status for r in records if r.status == "fail"]
    return {
        "ok": not failed,
        "ops": {r.op: {"wrong": r.wrong, "skipped": r.skipped, "error": r.error} for r in results},
        "rows": [row.to_dict() for r in results for row in r.rows] if env.rank == 0 else [],
    }


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--ops", default=",".join(coll.OPS), help="comma list of collectives")
    p.add_argument("--sizes", default="", help="comma list (default 1M,16M,128M,1G; CPU 64K,1M)")
    p.add_argument("--dtype", default="float32", choices=sorted(bench.DTYPE_SIZES))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--result-node", default="", help="node name in the result file")
    p.add_argument("--result-json", default="", help="ResultFile written by local rank 0")
    p.add_argument("--kind", default="collectives", help="ResultFile kind")
    args = p.parse_args(argv)
    unknown = [o for o in args.ops.split(",") if o.strip() and o.strip() not in coll.OPS]
    if unknown:
        p.error(f"--ops: unknown collective(s) {unknown}; known: {', '.join(coll.OPS)}")
    if not args.sizes:
        import torch

        args.sizes = bench.DEFAULT_GPU_SIZES if torch.cuda.is_available() else DEFAULT_CPU_SIZES
    return run_worker("collectives", body, args)


if __name__ == "__main__":
    sys.exit(main())
