"""All-reduce correctness and bandwidth sweep, with nccl-tests' formulas.

Formulas (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``)::

    algbw = size_bytes / time_s / 1e9                      (GB/s, 10^9 bytes)
    busbw = algbw * factor(n)   all_reduce: 2(n-1)/n; reduce_scatter, all_gather,
                                alltoall: (n-1)/n; broadcast, reduce, sendrecv: 1

``time`` of one size is the per-iteration mean over the timed iterations, taken as the
**maximum over ranks** (the slowest rank bounds a collective), which is how nccl-tests
reports a multi-process run.

The expected-bandwidth table lives in ``gpufleet/data/bandwidth.json`` (sources in the
file); a user file with the same layout is consulted first. The pure functions here do not
import torch; :func:`run_sweep` and :func:`check_allreduce` do, lazily.
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.results import BandwidthRow, Record, Status
from gpufleet.units import human_size

BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "int64": 8,
}

DEFAULT_GPU_SIZES = "1M,16M,128M,1G"
DEFAULT_CPU_SIZES = "4K,64K,1M,8M"


def busbw_factor(world_size: int, op: str = "all_reduce") -> float:
    """The nccl-tests bus-bandwidth factor of ``op`` for ``world_size`` ranks."""
    if world_size < 1:
        raise RefusedError(f"world size must be >= 1, got {world_size}")
    try:
        return BUSBW_FACTORS[op](world_size)
    except KeyError:
        raise RefusedError(f"unknown collective {op!r}; known: {sorted(BUSBW_FACTORS)}") from None


def algbw_gbs(size_bytes: int, time_s: float) -> float:
    """Algorithm bandwidth in GB/s (10^9 bytes per second)."""
    if time_s <= 0:
        raise ValueError(f"time must be > 0, got {time_s}")
    return size_bytes / time_s / 1e9


def busbw_gbs(algbw: float, world_size: int, op: str = "all_reduce") -> float:
    """Bus bandwidth from algorithm bandwidth (nccl-tests)."""
    return algbw * busbw_factor(world_size, op)


def make_row(
    size_bytes: int,
    dtype: str,
    time_s: float,
    world_size: int,
    backend: str,
    *,
    wrong: int = 0,
    op: str = "all_reduce",
) -> BandwidthRow:
    """A BandwidthRow of collective ``op`` from a measured per-iteration time (seconds)."""
    elem = DTYPE_SIZES[dtype]
    alg = algbw_gbs(size_bytes, time_s)
    return BandwidthRow(
        size_bytes=size_bytes,
        count=size_bytes // elem,
        dtype=dtype,
        time_us=round(time_s * 1e6, 3),
        algbw=_sig(alg),
        busbw=_sig(busbw_gbs(alg, world_size, op)),
        world_size=world_size,
        backend=backend,
        wrong=wrong,
        op=op,
    )


def _sig(x: float, digits: int = 6) -> float:
    """Round to significant digits (CPU-mode bandwidths are tiny, GPU ones large)."""
    return float(f"{x:.{digits}g}")


# --------------------------------------------------------------------------- table


@dataclass(frozen=True)
class Expectation:
    """One row of the expected-busbw table."""

    name: str
    match: tuple[str, ...]  # substrings of the GPU name (case-insensitive)
    fabric: str  # "nvlink" (one node), "ib", "roce", "ethernet", "any"
    scope: str  # "node" (world inside one node) or "cluster"
    gpus: int | None  # ranks the figure is for; None = any
    min_busbw: float  # gate, GB/s
    typical_busbw: float | None
    measured_at: str  # message size the figure was measured at (information)
    source: str


@dataclass(frozen=True)
class Threshold:
    value: float | None
    source: str  # which table row or option set it, or why there is none


def load_table(path: str | Path | None = None) -> list[Expectation]:
    """Rows of ``path`` (a user file) followed by the shipped table."""
    rows: list[Expectation] = []
    texts: list[tuple[str, str]] = []
    if path:
        p = Path(path)
        if not p.is_file():
            raise RefusedError(f"bandwidth table {p} does not exist (verify_bandwidth_table)")
        texts.append((str(p), p.read_text(encoding="utf-8")))
    shipped = resources.files("gpufleet").joinpath("data/bandwidth.json")
    texts.append(("gpufleet/data/bandwidth.json", shipped.read_text(encoding="utf-8")))
    for origin, text in texts:
        try:
            data = json.loads(text)
            for e in data["entries"]:
                rows.append(
                    Expectation(
                        name=str(e["name"]),
                        match=tuple(str(x) for x in e["match"]),
                        fabric=str(e.get("fabric", "any")),
                        scope=str(e.get("scope", "node")),
                        gpus=int(e["gpus"]) if e.get("gpus") is not None else None,
                        min_busbw=float(e["min_busbw"]),
                        typical_busbw=(
                            float(e["typical_busbw"])
                            if e.get("typical_busbw") is not None
                            else None
                        ),
                        measured_at=str(e.get("measured_at", "")),
                        source=str(e.get("source", origin)),
                    )
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise RefusedError(f"{origin}: malformed bandwidth table ({exc!r})") from exc
    return rows


def lookup_threshold(
    gpu_name: str | None,
    world_size: int,
    nnodes: int,
    *,
    fabric: str = "",
    table: Sequence[Expectation] | None = None,
    override: float | None = None,
) -> Threshold:
    """The busbw gate for this run, or a Threshold(None, why-not)."""
    if override is not None and override > 0:
        return Threshold(float(override), "set by option (verify_busbw_min / --busbw-min)")
    if world_size < 2:
        return Threshold(None, "one rank: all-reduce moves no data, busbw is 0 by definition")
    if not gpu_name:
        return Threshold(None, "CPU mode: reported without threshold (set verify_busbw_min)")
    scope = "node" if nnodes <= 1 else "cluster"
    for row in table if table is not None else load_table():
        if row.scope != scope:
            continue
        if not any(m.lower() in gpu_name.lower() for m in row.match):
            continue
        if row.gpus is not None and row.gpus != world_size:
            continue
        if scope == "cluster" and row.fabric != fabric:
            continue  # inter-node figures depend on the NICs: only with verify_fabric
        if scope == "node" and fabric and row.fabric not in ("any", fabric):
            continue
        return Threshold(row.min_busbw, f"{row.name} ({row.source})")
    return Threshold(
        None,
        f"no table entry for {gpu_name!r} x {world_size} ranks on {nnodes} node(s)"
        + (
            f", fabric {fabric}"
            if fabric
            else ("; multi-node rows need the fabric (verify_fabric)" if scope == "cluster" else "")
        )
        + "; add one to a file named by verify_bandwidth_table or set verify_busbw_min",
    )


SLOW_BUSBW_REMEDY = (
    "check NVLink/NIC state (nvidia-smi topo -m, nvidia-smi nvlink -s), "
    "NCCL_DEBUG=INFO for NET/Socket fallback, NCCL_SOCKET_IFNAME/NCCL_IB_HCA in "
    "/etc/gpufleet/nccl.env, nvidia-peermem for GPUDirect RDMA; the pair reruns "
    "name the slow node"
)


def gate(rows: Sequence[BandwidthRow], threshold: Threshold, node: str = "") -> Record:
    """Pass/fail on busbw at the largest size (never on the average, see nccl-tests)."""
    if not rows:
        return Record(
            name="allreduce_busbw",
            status="fail",
            node=node,
            message="the sweep produced no rows",
            remedy="look at the worker log of rank 0",
        )
    last = max(rows, key=lambda r: r.size_bytes)
    where = f"busbw {last.busbw:.2f} GB/s at {human_size(last.size_bytes)}"
    limit = threshold.value
    if limit is None:
        status: Status = "pass"
        message = f"{where}; no threshold: {threshold.source}"
    elif last.busbw < limit:
        status, message = "fail", f"{where} is below {limit} GB/s ({threshold.source})"
    else:
        status, message = "pass", f"{where} >= {limit} GB/s ({threshold.source})"
    return Record(
        name="allreduce_busbw",
        status=status,
        node=node,
        value=last.busbw,
        threshold=limit,
        message=message,
        remedy=SLOW_BUSBW_REMEDY if status == "fail" else "",
    )


# --------------------------------------------------------------------------- torch side


def expected_sum(world_size: int) -> int:
    """Each rank contributes rank+1, so the sum is n(n+1)/2."""
    return world_size * (world_size + 1) // 2


def check_allreduce(device: Any, world_size: int, rank: int, numel: int = 4096) -> int:
    """One all-reduce of the rank+1 pattern; returns the number of wrong elements."""
    import torch
    import torch.distributed as dist

    t = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return int((t != float(expected_sum(world_size))).sum().item())


def run_sweep(
    sizes: Sequence[int],
    *,
    dtype: str,
    warmup: int,
    iters: int,
    device: Any,
    backend: str,
    progress: Callable[[BandwidthRow], None] | None = None,
    raw: list[dict[str, Any]] | None = None,
) -> list[BandwidthRow]:
    """Time in-place all-reduce for each size on the default process group.

    Per size: check one all-reduce of the rank+1 pattern (``wrong``), then ``warmup``
    untimed and ``iters`` timed iterations on a zero buffer (values stay bounded).
    The reported time is the max over ranks of the local per-iteration mean.
    ``progress`` is called with each row as soon as its size is done. ``raw`` (when given)
    gets this rank's measurements per size: bytes, count, every timed iteration in seconds
    (CUDA events on GPU, perf_counter around each blocking call on CPU) and the min/max of
    the reduced rank+1 buffer, so that a reader can recompute the row independently.
    """
    import torch
    import torch.distributed as dist

    tdtype = getattr(torch, dtype)
    world = dist.get_world_size()
    rank = dist.get_rank()
    cuda = getattr(device, "type", str(device)) == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    rows: list[BandwidthRow] = []
    for size in sizes:
        count = max(1, size // DTYPE_SIZES[dtype])
        buf = torch.full((count,), float(rank + 1), dtype=tdtype, device=device)
        dist.all_reduce(buf)
        wrong = int((buf != float(expected_sum(world))).sum().item())
        reduced = (float(buf.min().item()), float(buf.max().item()))
        buf.zero_()
        for _ in range(warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        times = timed_iters(
            functools.partial(dist.all_reduce, buf), iters, device if cuda else None
        )
        local = sum(times) / max(1, len(times))
        if raw is not None:
            raw.append(
                {
                    "size_bytes": count * DTYPE_SIZES[dtype],
                    "count": count,
                    "dtype": dtype,
                    "iter_s": times,
                    "reduced_min": reduced[0],
                    "reduced_max": reduced[1],
                }
            )
        tmax = torch.tensor([local], dtype=torch.float64, device=device)
        dist.all_reduce(tmax, op=dist.ReduceOp.MAX)
        wbuf = torch.tensor([wrong], dtype=torch.int64, device=device)
        dist.all_reduce(wbuf)
        t = float(tmax.item())
        if not math.isfinite(t) or t <= 0:
            t = 1e-9
        row = make_row(count * DTYPE_SIZES[dtype], dtype, t, world, backend, wrong=int(wbuf.item()))
        rows.append(row)
        if progress is not None:
            progress(row)
        del buf
    return rows


def timed_iters(op: Callable[[], Any], iters: int, cuda_device: Any) -> list[float]:
    """Seconds per call of ``op``: CUDA events around each call on GPU (one host sync at
    the end, so the stream is not stalled between iterations), perf_counter on CPU."""
    import torch

    if cuda_device is None:
        out = []
        for _ in range(iters):
            t0 = time.perf_counter()
            op()
            out.append(time.perf_counter() - t0)
        return out
    events = [
        (
            torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
            torch.cuda.Event(enable_timing=True),  # type: ignore[no-untyped-call]
        )
        for _ in range(iters)
    ]
    for start, end in events:
        start.record()
        op()
        end.record()
    torch.cuda.synchronize(cuda_device)
    return [start.elapsed_time(end) / 1e3 for start, end in events]
