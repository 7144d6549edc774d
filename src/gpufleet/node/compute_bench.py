"""Measure one device's compute with torch (the figures :mod:`gpufleet.node.compute` judges).

* :func:`measure`: a short sweep of matmul shapes in one dtype (on the CPU one thread:
  :data:`CPU_THREADS`). Per shape: ``warmup`` untimed matmuls (excluded), then ``repeats``
  timed runs of ``inner`` matmuls each, ``inner`` chosen from the fastest warm-up call
  (:func:`inner_count`) so that one run lasts about ``min_time_s`` (CUDA events on a GPU,
  ``perf_counter`` on the CPU); the shape's figure is the median run. The device's figure is
  the best shape's median, the way stas00/ml-engineering's mamf-finder reports the maximum
  achievable matmul (compute/accelerator/README.md), here on a time budget.
* :func:`sdc_digest`: a deterministic computation (a seeded chain of matmuls and tanh,
  inputs drawn on the CPU so every device starts from the same bits) and the SHA-256 of its
  result: two devices of one model running the same software must give the same digest.
* :func:`burn`: hold the device busy with its best shape for a duration, reporting a
  TFLOP/s figure per interval (the burn-in tier).

GPU work needs CUDA torch; the same code measures the CPU (``device="cpu"``), so the
testbed's CPU nodes run it in CI. torch is imported inside the functions.
"""

# ruff: noqa: PLC0415  (torch is imported lazily on purpose)

from __future__ import annotations

import hashlib
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.node.compute import DeviceFigure, ShapeFigure, best_shape, median_tflops, tflops

#: shape sweeps (cubes m = n = k), a short version of mamf-finder's range
GPU_SHAPES = (4096, 6144, 8192, 12288)
CPU_SHAPES = (256, 512)
#: the most matmuls in one timed run (a tiny shape on a fast device)
MAX_INNER = 1000
#: the deterministic computation: size x size matrices, steps of x = tanh(x @ w)
SDC_SIZE_GPU, SDC_SIZE_CPU = 2048, 256
SDC_STEPS = 8
SDC_SEED = 20261207
#: threads of the CPU figure: one, a figure per core. Nodes that share cores (the testbed's
#: three on two) then compare alike; with every core each, their thread pools oversubscribe
#: the cores and one node's figure came out 4x another's on a quiet machine
CPU_THREADS = 1


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"4096,8192x8192x16384"``: a number is a cube, ``MxNxK`` a shape; each side 1-65536."""
    out = []
    for item in (t.strip().lower() for t in text.split(",")):
        if not item:
            continue
        parts = item.split("x")
        if len(parts) not in (1, 3) or not all(p.isdigit() for p in parts):
            raise ValueError(
                f"shape {item!r}: write N (a cube) or MxNxK, e.g. 4096 or 8192x8192x4096"
            )
        sides = [int(p) for p in parts] * (3 if len(parts) == 1 else 1)
        if not all(1 <= s <= 65536 for s in sides):
            raise ValueError(f"shape {item!r}: each side must be 1-65536")
        out.append((sides[0], sides[1], sides[2]))
    if not out:
        raise ValueError("no matmul shape given")
    return out


def default_shapes(device: str) -> list[tuple[int, int, int]]:
    sides = CPU_SHAPES if device == "cpu" else GPU_SHAPES
    return [(s, s, s) for s in sides]


def torch_device(device: str) -> Any:
    import torch

    return torch.device("cpu") if device == "cpu" else torch.device("cuda", int(device))


def select(device: str) -> None:
    """Make ``device`` this process's current CUDA device and create its context: CUDA events
    and the default stream are the current device's (timing another device's matmuls would
    time nothing), and a process that starts measuring must not still be initialising CUDA
    while its siblings compute."""
    import torch

    if device != "cpu":
        torch.cuda.set_device(int(device))
        torch.empty(1, device=torch_device(device))


def _sync(dev: Any) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _timed(dev: Any, op: Callable[[], object], inner: int) -> float:
    """Seconds for ``inner`` calls of ``op``: CUDA events on a GPU, perf_counter on CPU."""
    import torch

    if dev.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(inner):
            op()
        return time.perf_counter() - t0
    stream = torch.cuda.current_stream(dev)  # the stream the device's matmuls run on
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record(stream)
    for _ in range(inner):
        op()
    end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3


def _operands(dev: Any, dtype: str, m: int, n: int, k: int) -> tuple[Any, Any, Any]:
    import torch

    tdtype = getattr(torch, dtype)
    a = torch.randn(m, k, device=dev).to(tdtype)
    b = torch.randn(k, n, device=dev).to(tdtype)
    return a, b, torch.empty(m, n, device=dev, dtype=tdtype)


def inner_count(warm_seconds: Sequence[float], min_time_s: float) -> int:
    """Matmuls per timed run so that one run lasts about ``min_time_s``, from the warm-up
    calls' seconds. The fastest warm call is the op's cost: a pause (a preempted process, a
    clock still ramping) only ever lengthens a call, and sizing from a paused call made every
    run a single matmul short enough to fall between pauses, so a device held back most of
    the time measured as healthy."""
    per_call = max(min(warm_seconds, default=0.0), 1e-7)
    return max(1, min(MAX_INNER, math.ceil(min_time_s / per_call)))


def measure_shape(
    device: str,
    dtype: str,
    shape: tuple[int, int, int],
    *,
    warmup: int,
    repeats: int,
    min_time_s: float,
) -> ShapeFigure:
    """The median TFLOP/s of ``repeats`` timed runs of one shape (warm-up excluded)."""
    import torch

    dev = torch_device(device)
    m, n, k = shape
    a, b, c = _operands(dev, dtype, m, n, k)

    def op() -> object:
        return torch.matmul(a, b, out=c)

    warm = [_timed(dev, op, 1) for _ in range(max(1, warmup))]
    inner = inner_count(warm, min_time_s)
    _sync(dev)
    runs = [tflops(m, n, k, _timed(dev, op, inner) / inner) for _ in range(max(1, repeats))]
    return ShapeFigure(m, n, k, round(median_tflops(runs), 4), len(runs))


def measure(
    device: str,
    dtype: str,
    shapes: Sequence[tuple[int, int, int]],
    *,
    warmup: int = 3,
    repeats: int = 5,
    min_time_s: float = 0.05,
    budget_s: float = 30.0,
    name: str = "",
    cpu_threads: int = CPU_THREADS,
) -> DeviceFigure:
    """The sweep of ``shapes`` on ``device`` in ``dtype``; shapes left when ``budget_s`` is
    spent are not measured (at least one always is). A failure (out of memory, CUDA error)
    is the figure's ``error``. On the CPU, ``cpu_threads`` threads compute (0: torch's
    default, every core)."""
    import torch

    started = time.monotonic()
    done: list[ShapeFigure] = []
    threads = torch.get_num_threads()
    if device == "cpu" and cpu_threads > 0:
        torch.set_num_threads(cpu_threads)
    try:
        for shape in shapes:
            if done and time.monotonic() - started > budget_s:
                break
            done.append(
                measure_shape(
                    device, dtype, shape, warmup=warmup, repeats=repeats, min_time_s=min_time_s
                )
            )
    except Exception as exc:  # torch raises RuntimeError subclasses (OOM, CUDA errors)
        if not done:
            return DeviceFigure(device, dtype, 0.0, name, (), (), f"{type(exc).__name__}: {exc}")
    finally:
        torch.set_num_threads(threads)
    best = best_shape(done)
    return DeviceFigure(device, dtype, best.tflops, name, tuple(done))


def sdc_digest(
    device: str, dtype: str, *, size: int, steps: int = SDC_STEPS, seed: int = SDC_SEED
) -> str:
    """SHA-256 of ``x = tanh(x @ w)`` iterated ``steps`` times from seeded inputs drawn on the
    CPU (the same bits on every device). On the CPU one thread computes it, so the result
    does not depend on how many cores the node lends the process."""
    import torch

    dev = torch_device(device)
    tdtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(seed)
    x0 = torch.randn(size, size, generator=gen)
    w0 = torch.randn(size, size, generator=gen) / math.sqrt(size)
    threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)
    try:
        x, w = x0.to(dev).to(tdtype), w0.to(dev).to(tdtype)
        for _ in range(steps):
            x = torch.tanh(torch.matmul(x, w))
        _sync(dev)
        data = x.float().cpu().contiguous().numpy().tobytes()
    finally:
        torch.set_num_threads(threads)
    return hashlib.sha256(data).hexdigest()


def burn(
    device: str,
    dtype: str,
    shape: tuple[int, int, int],
    *,
    duration_s: float,
    interval_s: float,
    report: Callable[[float, float], None],
) -> int:
    """Matmuls of ``shape`` on ``device`` for ``duration_s``; after each ``interval_s`` the
    interval's TFLOP/s goes to ``report(seconds since start, tflops)``. Returns the count."""
    import torch

    dev = torch_device(device)
    m, n, k = shape
    a, b, c = _operands(dev, dtype, m, n, k)
    if dev.type == "cpu":
        torch.set_num_threads(CPU_THREADS)  # as measure(): the intervals compare alike
    started = time.monotonic()
    count = 0
    while True:
        t0 = time.monotonic()
        done = 0
        while time.monotonic() - t0 < interval_s:
            torch.matmul(a, b, out=c)
            done += 1
            if dev.type == "cuda" and done % 16 == 0:
                _sync(dev)  # bound the queue so the interval measures finished work
        _sync(dev)
        spent = time.monotonic() - t0
        count += done
        elapsed = time.monotonic() - started
        report(round(elapsed, 3), round(tflops(m, n, k, spent / done), 4) if done else 0.0)
        if elapsed >= duration_s:
            return count


def device_model(device: str) -> str:
    """What the device is, for comparing digests: the GPU's name, or the CPU model and the
    instruction set torch's CPU kernels use."""
    import torch

    if device != "cpu":
        return str(torch.cuda.get_device_name(int(device)))
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")()
    return f"{model} ({capability})" if capability else model


def software() -> str:
    """torch and CUDA of this env: the software the digests depend on."""
    import torch

    return f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}"


def cuda_devices() -> list[str]:
    """The CUDA devices torch sees here, as indices ("0", "1", ...); [] without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [str(i) for i in range(torch.cuda.device_count())]


def best_dense_dtype(device: str) -> str:
    """bf16 where the GPU computes it (compute capability 8.0 and newer), else fp16; the
    CPU's float32 (fp8 needs scaled matmuls, not measured here)."""
    import torch

    if device == "cpu":
        return "float32"
    major, _ = torch.cuda.get_device_capability(int(device))
    return "bfloat16" if major >= 8 else "float16"


def deterministic_cuda_env() -> None:
    """cuBLAS picks one workspace configuration, so a GEMM gives the same bits every run
    (set before CUDA initialises; https://docs.nvidia.com/cuda/cublas/ results reproducibility)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
