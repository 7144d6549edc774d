"""``gpufleet compute``: compute per device on this node, and the burn-in, as a result file.

Every device at once (one process per GPU, started together behind a barrier, so the node
is measured loaded as it will run: power and heat shared), or the CPU as one device in this
process. Per device: the matmul sweep in each dtype (:func:`gpufleet.node.compute_bench.measure`;
bf16 on a GPU that has it, else fp16; float32 on the CPU), then the deterministic
computation ``sdc_repeats`` times (:func:`~gpufleet.node.compute_bench.sdc_digest`).

Judged on the node (:mod:`gpufleet.node.compute`) against the system profile chosen as the
node check ``profile`` chooses it (``--system-profile``, ``--profiles-dir``): each device
against the node's best (``tolerances.gpu_spread_fraction``), each GPU's bf16 figure against
``floors.matmul_bf16_tflops``, each device's repeats against each other. The result file
(kind ``compute``) keeps every figure and digest in ``meta`` for the report: the fleet median
(gpufleet.report.slownodes) and the digests across devices and nodes (gpufleet.report.sdc).

With ``burnin_s`` the devices then run their best shape for that long while NVML is sampled
(:mod:`gpufleet.node.gpu_sampler`) and the kernel log is read for Xids after the start; the
result file is kind ``burnin`` (:mod:`gpufleet.node.burnin` judges it).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_mod
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.node import burnin, compute, compute_bench, xid
from gpufleet.node.gpu_sampler import NvmlSampler, open_sampler
from gpufleet.results import Record, ResultFile, utc_stamp

#: seconds a device process may take beyond its budget before it counts as hung
GRACE_S = 120.0


@dataclass(frozen=True)
class Options:
    """What to measure and how (``gpufleet compute`` options, verify's variables)."""

    node: str
    dtypes: tuple[str, ...] = ()  # empty: bf16 on a GPU (fp16 before sm_80), float32 (CPU)
    shapes: str = ""  # empty: compute_bench's per-device sweep
    warmup: int = 3
    repeats: int = 5
    min_time_s: float = 0.05
    budget_s: float = 20.0  # per device and dtype
    sdc_repeats: int = 2
    sdc_size: int = 0  # 0: compute_bench's per-device default
    sdc_steps: int = compute_bench.SDC_STEPS
    system_profile: str = "auto"
    profiles_dir: str = ""
    devices: tuple[str, ...] = ()  # empty: every CUDA device, else the CPU
    burnin_s: float = 0.0
    interval_s: float = 0.0  # burn-in interval and sample period; 0: duration / 120, 1-30 s


@dataclass
class DeviceResult:
    device: str
    figures: list[compute.DeviceFigure] = field(default_factory=list)
    model: str = ""
    series: list[tuple[float, float]] = field(default_factory=list)  # burn-in (t, TFLOP/s)
    error: str = ""


# ------------------------------------------------------------------------ the profile


@dataclass(frozen=True)
class Tolerances:
    profile: str | None
    spread: float
    spread_source: str
    drop: float
    drop_source: str
    floor: compute.FloorSpec | None
    why: str = ""  # no profile: why


def tolerances(name: str, profiles_dir: str) -> Tolerances:
    """The profile's floor and tolerances, chosen as the node check ``profile`` chooses the
    profile (NVML product names and count, or the name set for the host); without one,
    gpu-fryer's 10 % and no floor, saying why."""
    from gpufleet.node import profiles  # noqa: PLC0415  (NVML only when asked)

    fallback = "gpu-fryer's 10 % (https://github.com/huggingface/gpu-fryer): no profile"
    try:
        prof = profiles.select_here(name, profiles_dir)
    except GpufleetError as exc:
        d = compute.DEFAULT_SPREAD
        return Tolerances(None, d, fallback, d, fallback, None, str(exc).splitlines()[0])
    spread, drop = prof.tolerance("gpu_spread_fraction"), prof.tolerance("burnin_drop_fraction")
    fl = prof.floor(compute.FLOOR_FIELD)
    return Tolerances(
        prof.name,
        float(spread.value),
        f"profile {prof.name}: {spread.source}",
        float(drop.value),
        f"profile {prof.name}: {drop.source}",
        compute.FloorSpec(
            prof.name, None if fl.value is None else float(fl.value), fl.source, fl.note
        ),
    )


# ------------------------------------------------------------------- one device's work


def dtypes_for(device: str, wanted: Sequence[str]) -> list[str]:
    """``wanted``, else the device's best dense dtype measured here: bf16 on a GPU that has
    it (the profile's floor is bf16's), fp16 before compute capability 8.0, float32 on CPU."""
    return list(wanted) or [compute_bench.best_dense_dtype(device)]


def measure_device(
    device: str, opts: Options, tick: Callable[[float, float], None] | None = None
) -> DeviceResult:
    """The sweep in each dtype, the digests, and (burn-in) the held load, on one device."""
    out = DeviceResult(device)
    try:
        compute_bench.select(device)
        out.model = compute_bench.device_model(device)
        shapes = (
            compute_bench.parse_shapes(opts.shapes)
            if opts.shapes
            else compute_bench.default_shapes(device)
        )
        size = opts.sdc_size or (
            compute_bench.SDC_SIZE_CPU if device == "cpu" else compute_bench.SDC_SIZE_GPU
        )
        for dtype in dtypes_for(device, opts.dtypes):
            fig = compute_bench.measure(
                device,
                dtype,
                shapes,
                warmup=opts.warmup,
                repeats=opts.repeats,
                min_time_s=opts.min_time_s,
                budget_s=opts.budget_s,
                name="" if device == "cpu" else out.model,
            )
            out.figures.append(fig)
        primary = out.figures[0]
        digests = tuple(
            compute_bench.sdc_digest(device, primary.dtype, size=size, steps=opts.sdc_steps)
            for _ in range(max(0, opts.sdc_repeats))
        )
        out.figures[0] = replace(primary, digests=digests)
        if opts.burnin_s > 0 and primary.shapes:
            best = compute.best_shape(primary.shapes)

            def report(t: float, value: float) -> None:
                out.series.append((t, value))
                if tick is not None:
                    tick(t, value)

            compute_bench.burn(
                device,
                primary.dtype,
                (best.m, best.n, best.k),
                duration_s=opts.burnin_s,
                interval_s=interval(opts),
                report=report,
            )
    except Exception as exc:  # a device that fails must not hide the others' figures
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def interval(opts: Options) -> float:
    if opts.interval_s > 0:
        return opts.interval_s
    return min(30.0, max(1.0, opts.burnin_s / 120.0))


def _child(slot: int, device: str, opts: Options, results: Any, barrier: Any) -> None:
    """A device's process: the same start as its siblings, then its work; ticks and the
    result on the queue, tagged with its ``slot`` (spawned: a module-level function)."""
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    compute_bench.deterministic_cuda_env()
    with contextlib.suppress(Exception):  # torch imported and CUDA up before the start
        compute_bench.select(device)
    with contextlib.suppress(Exception):
        barrier.wait(timeout=120)
    res = measure_device(device, opts, lambda t, v: results.put(("tick", slot, t, v)))
    results.put(("done", slot, _to_wire(res)))


def _to_wire(res: DeviceResult) -> dict[str, Any]:
    return {
        "device": res.device,
        "figures": [f.to_dict() for f in res.figures],
        "model": res.model,
        "series": res.series,
        "error": res.error,
    }


def _from_wire(data: Mapping[str, Any]) -> DeviceResult:
    return DeviceResult(
        str(data["device"]),
        [compute.DeviceFigure.from_dict(f) for f in data.get("figures") or []],
        str(data.get("model") or ""),
        [(float(t), float(v)) for t, v in data.get("series") or []],
        str(data.get("error") or ""),
    )


def run_devices(
    devices: Sequence[str], opts: Options, sampler: NvmlSampler | None = None
) -> tuple[list[DeviceResult], list[burnin.Sample]]:
    """Every device's work: the CPU alone in this process, else one process per device, all
    at once; NVML sampled every interval while they run (burn-in). A device that does not
    report within its budget is stopped and reported with that error."""
    samples: list[burnin.Sample] = []
    started = time.monotonic()
    if list(devices) == ["cpu"]:
        return [measure_device("cpu", opts)], samples
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    barrier = ctx.Barrier(len(devices))
    procs = [
        ctx.Process(target=_child, args=(i, d, opts, results, barrier))
        for i, d in enumerate(devices)
    ]
    for p in procs:
        p.start()
    budget = opts.budget_s * max(1, len(opts.dtypes) or 2) + opts.burnin_s + GRACE_S
    done: dict[int, DeviceResult] = {}
    next_sample = 0.0
    while len(done) < len(devices) and time.monotonic() - started < budget:
        now = time.monotonic() - started
        if sampler is not None and opts.burnin_s > 0 and now >= next_sample:
            samples += sampler.sample(now)
            next_sample = now + interval(opts)
        try:
            msg = results.get(timeout=0.5)
        except queue_mod.Empty:
            if not any(p.is_alive() for i, p in enumerate(procs) if i not in done):
                break
            continue
        if msg[0] == "done":
            done[int(msg[1])] = _from_wire(msg[2])
    for i, p in enumerate(procs):
        p.join(timeout=5 if i in done else 0.1)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
        if i not in done:
            why = (
                f"its process exited with code {p.exitcode} before reporting"
                if p.exitcode not in (None, -9)
                else f"no result within {budget:.0f} s (stopped)"
            )
            done[i] = DeviceResult(devices[i], error=why)
    return [done[i] for i in range(len(devices))], samples


# ------------------------------------------------------------------------- the result


def compute_records(node: str, results: Sequence[DeviceResult], tol: Tolerances) -> list[Record]:
    figures = device_figures(results)
    records = compute.judge_spread(node, figures, tol.spread, tol.spread_source)
    records.append(compute.judge_floor(node, figures, tol.floor))
    if tol.floor is None and tol.why:
        records[-1] = replace(records[-1], message=f"{records[-1].message}: {tol.why}")
    return records + compute.judge_repeats(node, figures)


def device_figures(results: Sequence[DeviceResult]) -> list[compute.DeviceFigure]:
    out = []
    for r in results:
        if r.error and not r.figures:
            out.append(compute.DeviceFigure(r.device, "?", 0.0, r.model, (), (), r.error))
        out += r.figures
    return out


def sdc_key(results: Sequence[DeviceResult], opts: Options) -> dict[str, str]:
    first = next((r for r in results if r.figures), None)
    dtype = first.figures[0].dtype if first else "?"
    device = first.device if first else "cpu"
    size = opts.sdc_size or (
        compute_bench.SDC_SIZE_CPU if device == "cpu" else compute_bench.SDC_SIZE_GPU
    )
    models = sorted({r.model for r in results if r.model})
    return {
        "model": " / ".join(models),
        "software": compute_bench.software(),
        "params": f"{dtype} {size}x{size}, {opts.sdc_steps} steps, seed {compute_bench.SDC_SEED}",
    }


def run(opts: Options) -> ResultFile:
    """Measure and judge this node; the burn-in when ``opts.burnin_s`` > 0."""
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    devices = list(opts.devices) or compute_bench.cuda_devices() or ["cpu"]
    tol = tolerances(opts.system_profile, opts.profiles_dir)
    sampler, no_sampler = (None, "the CPU has no NVML") if devices == ["cpu"] else open_sampler()
    try:
        results, samples = run_devices(devices, opts, sampler)
    finally:
        if sampler is not None:
            sampler.close()
    meta: dict[str, Any] = {
        "devices": devices,
        "figures": [f.to_dict() for f in device_figures(results)],
        "sdc_key": sdc_key(results, opts),
        "profile": tol.profile,
        "profile_why": tol.why,
        "spread_fraction": tol.spread,
        "options": asdict(opts),
    }
    mode = "cpu" if devices == ["cpu"] else "gpu"
    if opts.burnin_s <= 0:
        records = compute_records(opts.node, results, tol)
        kind = "compute"
    else:
        kind = "burnin"
        records, extra = burnin_records(opts, started, results, samples, tol, no_sampler)
        meta.update(extra)
    return ResultFile(
        kind=kind,
        node=opts.node,
        mode=mode,
        started=utc_stamp(started),
        duration_s=time.monotonic() - t0,
        records=records,
        meta=meta,
    )


def burnin_records(
    opts: Options,
    started: datetime,
    results: Sequence[DeviceResult],
    samples: Sequence[burnin.Sample],
    tol: Tolerances,
    no_sampler: str,
) -> tuple[list[Record], dict[str, Any]]:
    """The burn-in's verdicts and what the report shows of its samples."""
    node = opts.node
    series = {r.device: r.series for r in results}
    records: list[Record] = [
        Record(
            "burnin_device",
            "fail",
            node=node,
            gpu=None if r.device == "cpu" else r.device,
            message=f"{node} device {r.device}: {r.error}",
            remedy="run `gpufleet compute --burnin 60` on the node and read its output",
        )
        for r in results
        if r.error
    ]
    records += burnin.judge_drop(node, series, tol.drop, tol.drop_source)
    if samples:
        records += burnin.judge_throttle(node, samples)
    else:
        records.append(
            Record(
                burnin.THROTTLE,
                "skip",
                node=node,
                message=f"{node}: no clock or throttle samples ({no_sampler})",
            )
        )
    window = (datetime.now(timezone.utc) - started).total_seconds() / 3600 + 0.1
    try:
        lines, _ = xid.read_kernel_log(window)
        records.append(burnin.judge_xid(node, xid.parse(lines), started))
    except xid.KernelLogUnavailable as exc:
        records.append(burnin.judge_xid(node, [], started, str(exc)))
    intervals = sum(len(v) for v in series.values())
    records.append(
        Record(
            burnin.SAMPLES,
            "pass",
            node=node,
            value=len(samples),
            message=f"{node}: {opts.burnin_s:g} s held on {len(results)} device(s): "
            f"{intervals} matmul intervals, {len(samples)} NVML samples"
            + (f" ({no_sampler})" if not samples else ""),
        )
    )
    extra = {
        "duration_s": opts.burnin_s,
        "interval_s": interval(opts),
        "series": {d: [[t, v] for t, v in s] for d, s in series.items()},
        "samples": [asdict(s) for s in samples],
        "summary": burnin.summary(samples, series),
        "drop_fraction": tol.drop,
    }
    return records, extra
