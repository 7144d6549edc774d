"""Compute per GPU: what the matmul figures of one node say (pure functions, no torch).

The figures come from :mod:`gpufleet.node.compute_bench` (a short sweep of matmul shapes per
device, warm-up excluded, the median of repeats per shape, the best shape's median kept: the
"maximum achievable matmul" of stas00/ml-engineering's mamf-finder, on a budget). Judged here:

* :func:`judge_spread`: each device against the best device of its node: more than the
  profile's ``tolerances.gpu_spread_fraction`` below fails (gpu-fryer fails a GPU more than
  10 % below the best GPU of its node, https://github.com/huggingface/gpu-fryer);
* :func:`judge_floor`: each GPU's bf16 figure against the system profile's
  ``floors.matmul_bf16_tflops`` (with its source; a null floor is said with its note);
* :func:`judge_repeats`: every repeat of the deterministic computation on one device gave
  the same digest (an intermittent fault shows as a device that disagrees with itself).

Each node against the fleet median is :mod:`gpufleet.report.slownodes`' ``compute_tflops``;
the digests of every device of every node are compared in :mod:`gpufleet.report.sdc`.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.results import Record, Status

#: record names (the kind is the result file's, ``compute``)
SPREAD = "compute_matmul"
FLOOR = "compute_floor"
REPEATS = "sdc_repeat"
#: the profile's floor and tolerance fields read here
FLOOR_FIELD = "matmul_bf16_tflops"
SPREAD_FIELD = "gpu_spread_fraction"
DEFAULT_SPREAD = 0.10  # gpu-fryer's 10 %, where no profile states one
#: the dtype the profile's floor is stated in
FLOOR_DTYPE = "bfloat16"

REMEDY_SLOW_GPU = (
    "look at this GPU while it is loaded: nvidia-smi -q -d PERFORMANCE,CLOCK,TEMPERATURE,POWER "
    "(throttle reasons, clocks, temperature, power limit), its fan/airflow and power cabling; "
    "rerun `gpufleet compute` on the node (or make verify TIER=quick); swap or RMA the GPU "
    "if it stays behind its siblings"
)
REMEDY_FLOOR = (
    "the GPU computes below what its model reaches: check clocks and throttle reasons "
    "(nvidia-smi -q -d PERFORMANCE,CLOCK), the power limit (nvidia-smi -q -d POWER), "
    "application clocks and MIG mode; run make verify TIER=burnin to see whether it throttles "
    "under load; RMA if it stays below the floor"
)
REMEDY_REPEAT = (
    "the same computation on the same GPU gave different bits: silent data corruption. "
    "Drain the node, run dcgmi diag -r 3 on this GPU and the node checks (ECC, row remapping), "
    "reset the GPU; RMA if it recurs"
)


@dataclass(frozen=True)
class ShapeFigure:
    """One matmul shape of the sweep: (m, n, k), the median TFLOP/s over ``repeats``."""

    m: int
    n: int
    k: int
    tflops: float
    repeats: int


@dataclass(frozen=True)
class DeviceFigure:
    """One device's matmul figure in one dtype: the best shape's median (TFLOP/s)."""

    device: str  # "0".."7" (torch index on the node) or "cpu"
    dtype: str
    tflops: float
    name: str = ""  # the GPU's name (torch), "" on CPU
    shapes: tuple[ShapeFigure, ...] = ()
    #: digests of the deterministic computation, one per repeat (gpufleet.node.compute_bench)
    digests: tuple[str, ...] = ()
    error: str = ""  # the measurement failed on this device (out of memory, CUDA error)

    @property
    def label(self) -> str:
        return "CPU" if self.device == "cpu" else f"GPU {self.device}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeviceFigure:
        return cls(
            device=str(data["device"]),
            dtype=str(data["dtype"]),
            tflops=float(data.get("tflops") or 0.0),
            name=str(data.get("name") or ""),
            shapes=tuple(ShapeFigure(**s) for s in data.get("shapes") or ()),
            digests=tuple(str(d) for d in data.get("digests") or ()),
            error=str(data.get("error") or ""),
        )


@dataclass(frozen=True)
class FloorSpec:
    """A profile floor as this module needs it: value (None: no public figure, ``note``)."""

    profile: str
    value: float | None
    source: str = ""
    note: str = ""


def tflops(m: int, n: int, k: int, seconds: float) -> float:
    """Dense matmul throughput: 2·m·n·k floating point operations in ``seconds``."""
    if seconds <= 0:
        raise ValueError(f"time must be > 0, got {seconds}")
    return 2.0 * m * n * k / seconds / 1e12


def best_shape(shapes: Sequence[ShapeFigure]) -> ShapeFigure:
    """The shape with the highest median: the most this device achieved in the sweep."""
    if not shapes:
        raise ValueError("no shape was measured")
    return max(shapes, key=lambda s: (s.tflops, s.m * s.n * s.k))


def median_tflops(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def _figure_text(f: DeviceFigure) -> str:
    return f"{f.tflops:.4g} TFLOP/s {f.dtype}"


def judge_spread(
    node: str, figures: Sequence[DeviceFigure], fraction: float = DEFAULT_SPREAD, source: str = ""
) -> list[Record]:
    """Each device's figure against the best device of the node in the same dtype: below
    ``(1 - fraction) x best`` fails, naming the device, its figure, the best and the ratio.
    A device whose measurement failed fails with its error; one device alone passes with
    "nothing to compare with" (the fleet median compares nodes)."""
    out: list[Record] = []
    rule = f"more than {fraction:.0%} below the node's best fails" + (
        f" ({source})" if source else ""
    )
    for dtype in sorted({f.dtype for f in figures}):
        mine = [f for f in figures if f.dtype == dtype]
        measured = [f for f in mine if not f.error and f.tflops > 0]
        best = max(measured, key=lambda f: f.tflops) if measured else None
        for f in mine:
            gpu = None if f.device == "cpu" else f.device
            if f.error or f.tflops <= 0:
                out.append(
                    Record(
                        name=SPREAD,
                        status="fail",
                        node=node,
                        gpu=gpu,
                        value=None,
                        message=f"{node} {f.label}: no {dtype} matmul figure: "
                        f"{f.error or 'the sweep measured nothing'}",
                        remedy="run `gpufleet compute` on the node and read its log; "
                        "run the node checks (checks/) for this GPU",
                    )
                )
                continue
            assert best is not None
            if len(measured) == 1:
                out.append(
                    Record(
                        name=SPREAD,
                        status="pass",
                        node=node,
                        gpu=gpu,
                        value=round(f.tflops, 4),
                        message=f"{node} {f.label}: {_figure_text(f)}; one device: nothing in "
                        "this node to compare with (the fleet median compares the nodes)",
                    )
                )
                continue
            limit = (1.0 - fraction) * best.tflops
            ratio = f.tflops / best.tflops
            status: Status = "fail" if f.tflops < limit else "pass"
            out.append(
                Record(
                    name=SPREAD,
                    status=status,
                    node=node,
                    gpu=gpu,
                    value=round(f.tflops, 4),
                    threshold=round(limit, 4),
                    message=f"{node} {f.label}: {_figure_text(f)} = {ratio:.2f} x the node's "
                    f"best ({best.label}, {best.tflops:.4g}); {rule}",
                    remedy=REMEDY_SLOW_GPU if status == "fail" else "",
                )
            )
    return out


def judge_floor(node: str, figures: Sequence[DeviceFigure], floor: FloorSpec | None) -> Record:
    """The GPUs' bf16 figures against the profile's floor: one record for the node, failing
    with every GPU below it; a skip saying why when nothing can be judged (no profile, a
    null floor and its note, no bf16 figure: a CPU node or a GPU without bf16)."""
    bf16 = [f for f in figures if f.dtype == FLOOR_DTYPE and not f.error and f.device != "cpu"]
    if floor is None:
        return Record(
            FLOOR,
            "skip",
            node=node,
            message=f"{node}: no system profile chosen "
            "(the node check profile): the matmul floor is not judged",
        )
    if floor.value is None:
        return Record(
            FLOOR,
            "skip",
            node=node,
            message=f"{node}: profile {floor.profile} has no {FLOOR_FIELD} floor ({floor.note})",
        )
    if not bf16:
        return Record(
            FLOOR,
            "skip",
            node=node,
            threshold=floor.value,
            message=f"{node}: no {FLOOR_DTYPE} matmul figure on a GPU to judge against "
            f"{floor.value} TFLOP/s (profile {floor.profile})",
        )
    below = sorted((f for f in bf16 if f.tflops < floor.value), key=lambda f: f.tflops)
    worst = min(bf16, key=lambda f: f.tflops)
    where = (
        f"profile {floor.profile}: {floor.source}" if floor.source else f"profile {floor.profile}"
    )
    if not below:
        return Record(
            FLOOR,
            "pass",
            node=node,
            value=round(worst.tflops, 4),
            threshold=floor.value,
            message=f"{node}: every GPU >= {floor.value} TFLOP/s {FLOOR_DTYPE} (lowest "
            f"{worst.label} {worst.tflops:.4g}; {where})",
        )
    listed = ", ".join(f"{f.label} {f.tflops:.4g}" for f in below)
    return Record(
        FLOOR,
        "fail",
        node=node,
        gpu=below[0].device if len(below) == 1 else None,
        value=round(worst.tflops, 4),
        threshold=floor.value,
        message=f"{node}: {len(below)} of {len(bf16)} GPU(s) below the floor "
        f"{floor.value} TFLOP/s {FLOOR_DTYPE}: {listed} ({where})",
        remedy=REMEDY_FLOOR,
    )


def judge_repeats(node: str, figures: Sequence[DeviceFigure]) -> list[Record]:
    """Each device's repeats of the deterministic computation gave one digest."""
    out = []
    seen: set[str] = set()
    for f in figures:
        if f.device in seen or not f.digests:
            continue
        seen.add(f.device)
        gpu = None if f.device == "cpu" else f.device
        distinct = sorted(set(f.digests))
        if len(distinct) == 1:
            out.append(
                Record(
                    REPEATS,
                    "pass",
                    node=node,
                    gpu=gpu,
                    value=distinct[0][:16],
                    message=f"{node} {f.label}: {len(f.digests)} repeats of the deterministic "
                    f"computation gave the same bits ({distinct[0][:16]})",
                )
            )
        else:
            out.append(
                Record(
                    REPEATS,
                    "fail",
                    node=node,
                    gpu=gpu,
                    value=len(distinct),
                    message=f"{node} {f.label}: {len(f.digests)} repeats of the same "
                    f"computation gave {len(distinct)} different results "
                    f"({', '.join(d[:12] for d in distinct)})",
                    remedy=REMEDY_REPEAT,
                )
            )
    return out


@dataclass(frozen=True)
class SdcKey:
    """What must be equal for two devices' digests to be comparable: the device model and the
    software that computed (torch, CUDA, the computation's own parameters)."""

    model: str
    software: str
    params: str

    def text(self) -> str:
        return f"{self.model}, {self.software}, {self.params}"


@dataclass
class NodeCompute:
    """One node's compute.json as the report reads it (meta ``compute``)."""

    node: str
    figures: list[DeviceFigure] = field(default_factory=list)
    sdc_key: SdcKey | None = None

    @classmethod
    def from_meta(cls, node: str, meta: Mapping[str, Any]) -> NodeCompute:
        figs = [DeviceFigure.from_dict(d) for d in meta.get("figures") or []]
        key = meta.get("sdc_key")
        sdc = (
            SdcKey(**{k: str(key.get(k, "")) for k in ("model", "software", "params")})
            if (isinstance(key, Mapping))
            else None
        )
        return cls(node, figs, sdc)

    def primary(self) -> list[DeviceFigure]:
        """The figures the node is compared by: bf16 on GPUs, the CPU's own dtype on CPU."""
        gpu = [f for f in self.figures if f.device != "cpu"]
        if gpu:
            return [f for f in gpu if f.dtype == FLOOR_DTYPE] or gpu
        return list(self.figures)

    def node_tflops(self) -> float | None:
        """The node's figure against the fleet: the median of its devices' primary figures."""
        values = [f.tflops for f in self.primary() if not f.error and f.tflops > 0]
        return median_tflops(values) if values else None
