"""Every collective beside all-reduce: correctness, then a size sweep with nccl-tests' factor.

The collectives and what a size means (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``): the bytes
of one rank's whole buffer, the output of ``all_gather``, the input of ``reduce_scatter``,
the send buffer of ``alltoall``, the buffer of ``broadcast`` (root 0) and the bytes one rank
sends in ``sendrecv`` (a ring: rank r sends to r+1 and receives from r-1). algbw = size /
time; busbw = algbw x the collective's factor (:data:`gpufleet.verify.bandwidth.BUSBW_FACTORS`:
(n-1)/n for all_gather, reduce_scatter and alltoall, 1 for broadcast and sendrecv).

Correctness: each collective once on a pattern where every element says where it came from
(:func:`expected`), compared exactly; a wrong element fails the collective, whatever its
bandwidth. A collective the backend does not implement (gloo lacks some, the backend table
of the torch.distributed docs) raises on every rank at the call: it is a ``skip`` with the
backend's own words, not a failure. Time per size = the max over ranks of the per-iteration
mean, as for all-reduce (:func:`gpufleet.verify.bandwidth.run_sweep`).

Pure functions at the top; :func:`run_op` imports torch lazily.
"""

# ruff: noqa: PLC0415  (torch is imported lazily on purpose)

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.results import BandwidthRow, Record
from gpufleet.units import human_size
from gpufleet.verify import bandwidth as bench

OPS = ("all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
#: elements per rank chunk of the correctness pattern (float32: exact small integers)
CHECK_CHUNK = 1024
#: words in a backend's error that mean "this collective is not implemented here"
UNSUPPORTED = ("not supported", "does not support", "unsupported", "not implemented")
REMEDY_WRONG = (
    "a collective returned wrong data: run the node checks (ECC, row remapping) on every node "
    "of this run, NCCL_DEBUG=INFO; rerun make verify; the bisection and pair reruns of the "
    "all-reduce name a node when one is at fault"
)


def record_name(op: str) -> str:
    return f"collective_{op}"


def unsupported(error: BaseException | str) -> bool:
    """Whether a backend's error says the collective is not implemented (a skip)."""
    text = str(error).lower()
    return any(w in text for w in UNSUPPORTED)


def chunks_per_rank(op: str, world: int) -> int:
    """How many rank-sized chunks one rank's buffer holds for ``op``."""
    return world if op in ("all_gather", "reduce_scatter", "alltoall") else 1


def pattern(op: str, rank: int, world: int) -> list[float]:
    """The value of each chunk of rank ``rank``'s input for the correctness pass."""
    if op == "all_gather":
        return [float(rank + 1)]  # its own chunk; the output holds every rank's
    if op == "reduce_scatter":
        return [float(rank + 1 + j * world) for j in range(world)]
    if op == "alltoall":
        return [float(rank * world + j + 1) for j in range(world)]
    if op == "broadcast":
        return [7.0 if rank == 0 else 0.0]
    if op == "sendrecv":
        return [float(rank + 1)]
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def expected(op: str, rank: int, world: int) -> list[float]:
    """The value each chunk of rank ``rank``'s output must hold after ``op``."""
    if op == "all_gather":
        return [float(j + 1) for j in range(world)]
    if op == "reduce_scatter":  # sum over ranks r of (r + 1 + rank * world)
        return [float(world * (world + 1) // 2 + rank * world * world)]
    if op == "alltoall":  # chunk i came from rank i's chunk ``rank``
        return [float(i * world + rank + 1) for i in range(world)]
    if op == "broadcast":
        return [7.0]
    if op == "sendrecv":
        return [float((rank - 1) % world + 1)]
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


@dataclass
class OpResult:
    """One collective on this run: wrong elements over all ranks, its rows, or why skipped."""

    op: str
    wrong: int = 0
    rows: list[BandwidthRow] = field(default_factory=list)
    skipped: str = ""  # the backend's words when it lacks the collective
    error: str = ""  # it failed for another reason


def op_record(res: OpResult, node: str, world: int, backend: str) -> Record:
    """The verdict of one collective: skip (the backend lacks it), fail (wrong data, an
    error), else pass with busbw at the largest size (no gate: floors per profile are judged
    by the report, gpufleet.report.profile_floors)."""
    name = record_name(res.op)
    if res.skipped:
        return Record(
            name,
            "skip",
            node=node,
            message=f"{res.op}: {backend} does not run it here ({res.skipped})",
        )
    if res.error:
        return Record(
            name,
            "fail",
            node=node,
            message=f"{res.op} failed on {world} ranks ({backend}): {res.error}",
            remedy=REMEDY_WRONG,
        )
    wrong = res.wrong + sum(r.wrong for r in res.rows)
    last = max(res.rows, key=lambda r: r.size_bytes) if res.rows else None
    figure = (
        f"busbw {last.busbw:g} GB/s at {human_size(last.size_bytes)} "
        f"(factor {bench.busbw_factor(world, res.op):g})"
        if last
        else "no size swept"
    )
    if wrong:
        return Record(
            name,
            "fail",
            node=node,
            value=wrong,
            threshold=0,
            message=f"{res.op} on {world} ranks ({backend}): {wrong} wrong element(s); {figure}",
            remedy=REMEDY_WRONG,
        )
    return Record(
        name,
        "pass",
        node=node,
        value=last.busbw if last else None,
        message=f"{res.op} on {world} ranks ({backend}): every element right; {figure}",
    )


# ----------------------------------------------------------------------- torch side


def _call(op: str, out: Any, inp: Any, world: int, rank: int) -> None:
    """One ``op`` on the default process group; ``inp``/``out`` flat tensors."""
    import torch.distributed as dist

    if op == "all_gather":
        # torch 2.13 renamed the tensor forms (*_single); the old names warn there
        (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)
    elif op == "reduce_scatter":
        (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)
    elif op == "alltoall":
        dist.all_to_all_single(out, inp)
    elif op == "broadcast":
        dist.broadcast(out, src=0)
    elif op == "sendrecv":
        ops = [
            dist.P2POp(dist.isend, inp, (rank + 1) % world),
            dist.P2POp(dist.irecv, out, (rank - 1) % world),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
    else:
        raise ValueError(f"unknown collective {op!r}")


def _buffers(op: str, count: int, world: int, dtype: Any, device: Any) -> tuple[Any, Any]:
    """(input, output) of ``count`` elements per chunk."""
    import torch

    chunks = chunks_per_rank(op, world)
    in_n = count * (chunks if op in ("reduce_scatter", "alltoall") else 1)
    out_n = count * (chunks if op in ("all_gather", "alltoall") else 1)
    inp = torch.zeros(in_n, dtype=dtype, device=device)
    out = inp if op == "broadcast" else torch.zeros(out_n, dtype=dtype, device=device)
    return inp, out


def check(op: str, device: Any, world: int, rank: int, chunk: int = CHECK_CHUNK) -> int:
    """Wrong elements of one ``op`` on the pattern, on this rank."""
    import torch

    inp, out = _buffers(op, chunk, world, torch.float32, device)
    for j, v in enumerate(pattern(op, rank, world)):
        inp[j * chunk : (j + 1) * chunk] = v
    _call(op, out, inp, world, rank)
    want = torch.tensor(expected(op, rank, world), device=device).repeat_interleave(chunk)
    return int((out != want).sum().item())


def size_count(op: str, size: int, world: int, elem: int) -> int:
    """Elements per chunk so that one rank's whole buffer is ``size`` bytes (rounded down to
    whole chunks, at least one element each)."""
    return max(1, size // elem // chunks_per_rank(op, world))


def run_op(
    op: str,
    sizes: Sequence[int],
    *,
    dtype: str,
    warmup: int,
    iters: int,
    device: Any,
    backend: str,
    progress: Callable[[BandwidthRow], None] | None = None,
) -> OpResult:
    """Correctness, then the timed sweep of ``op``; a collective the backend lacks is
    ``skipped`` with its words."""
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    res = OpResult(op)
    if op == "sendrecv" and world < 2:
        res.skipped = "one rank: nothing to send"
        return res
    try:
        wrong = check(op, device, world, rank)
    except (RuntimeError, ValueError, NotImplementedError) as exc:
        if unsupported(exc):
            res.skipped = str(exc).strip().splitlines()[0][:300]
        else:
            res.error = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
        return res
    total = torch.tensor([wrong], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    res.wrong = int(total.item())
    tdtype = getattr(torch, dtype)
    elem = bench.DTYPE_SIZES[dtype]
    cuda = getattr(device, "type", "") == "cuda"
    for size in sizes:
        count = size_count(op, size, world, elem)
        inp, out = _buffers(op, count, world, tdtype, device)
        for _ in range(warmup):
            _call(op, out, inp, world, rank)
        if cuda:
            torch.cuda.synchronize(device)
        dist.barrier()
        times = bench.timed_iters(
            functools.partial(_call, op, out, inp, world, rank), iters, device if cuda else None
        )
        local = sum(times) / max(1, len(times))
        tmax = torch.tensor([local], dtype=torch.float64, device=device)
        dist.all_reduce(tmax, op=dist.ReduceOp.MAX)
        t = float(tmax.item())
        if not math.isfinite(t) or t <= 0:
            t = 1e-9
        nbytes = count * chunks_per_rank(op, world) * elem
        row = bench.make_row(nbytes, dtype, t, world, backend, op=op)
        res.rows.append(row)
        if progress is not None:
            progress(row)
        del inp, out
    return res
