"""Burn-in verdicts from the samples of a held load (pure functions, no NVML or torch).

During ``make verify TIER=burnin DURATION=30m`` every device runs matmuls for the duration
(:func:`gpufleet.node.compute_bench.burn`) while :mod:`gpufleet.node.gpu_sampler` samples each
GPU's SM clock, clock-event (throttle) reasons, temperature and power. Judged here, per GPU:

* :func:`judge_throttle`: a reason other than idle (0x1) or the software power cap (0x4, a
  power limit set by the admin) in any sample fails, naming the reasons and when they were
  first seen: hardware slowdown, thermal slowdown, power brake (Azure's
  check_gpu_clock_throttling lets exactly 0x0, 0x1 and 0x4 pass, validation facts §3;
  NVML's reason bits: nvmlDeviceGetCurrentClocksEventReasons);
* :func:`judge_drop`: the matmul figure of the last third of the run against the first
  third: a fall of more than the profile's ``tolerances.burnin_drop_fraction`` fails;
* :func:`judge_xid`: an Xid logged after the burn-in started fails, naming it.

:func:`summary` condenses the samples for the report (summary.json ``burnin``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpufleet.node.xid import CRITICAL_XIDS, XID_MEANING, XidEvent
from gpufleet.results import Record, Status

THROTTLE = "burnin_throttle"
DROP = "burnin_compute_drop"
XID = "burnin_xid"
SAMPLES = "burnin_samples"

#: NVML clock-event reason bits (nvml.h nvmlClocksEventReason*)
REASONS: Mapping[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x100: "display clock setting",
}
#: reasons that pass: idle, and the power cap an admin set
ALLOWED_REASONS = 0x1 | 0x4

REMEDY_THROTTLE = (
    "the GPU slowed itself under load: nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER shows "
    "why; check airflow, fans and inlet temperature (thermal), the PSU and power cabling "
    "(power brake, hardware slowdown); drain the node until it holds its clocks"
)
REMEDY_DROP = (
    "the GPU computed less as the run went on (heat soak or power): read this GPU's samples "
    "in burnin.json (clocks, temperature, power), check its cooling; rerun make verify "
    "TIER=burnin after fixing it"
)
REMEDY_XID = (
    "an Xid during the burn-in: look it up in NVIDIA's Xid catalogue "
    "(docs.nvidia.com/deploy/xid-errors), read journalctl -k around it; drain the node, reset "
    "the GPU, RMA if it recurs"
)


@dataclass(frozen=True)
class Sample:
    """One reading of one GPU during the burn-in (None: NVML did not answer for it)."""

    t: float  # seconds since the burn-in started
    gpu: str
    sm_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    reasons: int | None = None


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASONS.items() if bits & bit] + (
        [f"unknown 0x{bits & ~sum(REASONS):x}"] if bits & ~sum(REASONS) else []
    )


def _by_gpu(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.gpu, []).append(s)
    return {g: sorted(v, key=lambda s: s.t) for g, v in sorted(out.items())}


def judge_throttle(node: str, samples: Sequence[Sample]) -> list[Record]:
    """Per GPU: pass when every sample's reasons are idle or the software power cap."""
    out = []
    for gpu, mine in _by_gpu(samples).items():
        read = [s for s in mine if s.reasons is not None]
        bad = [s for s in read if s.reasons is not None and s.reasons & ~ALLOWED_REASONS]
        if not read:
            out.append(
                Record(
                    THROTTLE,
                    "skip",
                    node=node,
                    gpu=gpu,
                    message=f"{node} GPU {gpu}: NVML gave no clock-event reasons",
                )
            )
            continue
        if not bad:
            out.append(
                Record(
                    THROTTLE,
                    "pass",
                    node=node,
                    gpu=gpu,
                    value=0,
                    message=f"{node} GPU {gpu}: {len(read)} samples, no throttle reason but "
                    "idle or the software power cap",
                )
            )
            continue
        bits = 0
        for s in bad:
            bits |= (s.reasons or 0) & ~ALLOWED_REASONS
        out.append(
            Record(
                THROTTLE,
                "fail",
                node=node,
                gpu=gpu,
                value=f"0x{bits:x}",
                threshold=f"0x{ALLOWED_REASONS:x}",
                message=f"{node} GPU {gpu}: throttled ({', '.join(reason_names(bits))}) in "
                f"{len(bad)} of {len(read)} samples, first at {bad[0].t:.0f} s of the burn-in",
                remedy=REMEDY_THROTTLE,
            )
        )
    return out


def _third(values: Sequence[float], last: bool) -> float:
    k = max(1, len(values) // 3)
    return float(statistics.median(values[-k:] if last else values[:k]))


def judge_drop(
    node: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    fraction: float,
    source: str = "",
) -> list[Record]:
    """Per device: the median TFLOP/s of the last third of the intervals against the first
    third's; a fall of more than ``fraction`` fails. Fewer than 2 intervals: not judged."""
    out = []
    rule = f"a fall of more than {fraction:.0%} fails" + (f" ({source})" if source else "")
    for dev, points in sorted(series.items()):
        values = [v for _, v in sorted(points) if v > 0]
        label = "CPU" if dev == "cpu" else f"GPU {dev}"
        gpu = None if dev == "cpu" else dev
        if len(values) < 2:
            out.append(
                Record(
                    DROP,
                    "skip",
                    node=node,
                    gpu=gpu,
                    message=f"{node} {label}: {len(values)} interval(s) measured: a run this "
                    "short shows no trend (raise DURATION)",
                )
            )
            continue
        first, final = _third(values, False), _third(values, True)
        drop = 1.0 - final / first
        status: Status = "fail" if drop > fraction else "pass"
        out.append(
            Record(
                DROP,
                status,
                node=node,
                gpu=gpu,
                value=round(drop, 4),
                threshold=fraction,
                message=f"{node} {label}: {first:.4g} TFLOP/s in the first third of the burn-in, "
                f"{final:.4g} in the last ({drop:+.1%} fall over {len(values)} intervals); {rule}",
                remedy=REMEDY_DROP if status == "fail" else "",
            )
        )
    return out


def judge_xid(
    node: str, events: Sequence[XidEvent], started: datetime, log_error: str = ""
) -> Record:
    """Xids logged at or after ``started`` fail the burn-in; an unreadable kernel log is a
    skip saying why (the node check ``xid`` reports the log itself)."""
    if log_error:
        return Record(
            XID,
            "skip",
            node=node,
            message=f"{node}: the kernel log could not be "
            f"read ({log_error}): Xids during the burn-in not judged",
        )
    new = [e for e in events if e.when is not None and e.when >= started]
    if not new:
        return Record(XID, "pass", node=node, value=0, message=f"{node}: no Xid during the burn-in")
    listed = ", ".join(
        f"Xid {e.xid} on {e.pci} ({XID_MEANING.get(e.xid, 'see the Xid catalogue')}"
        f"{', critical' if e.xid in CRITICAL_XIDS else ''})"
        for e in new[:6]
    )
    return Record(
        XID,
        "fail",
        node=node,
        value=len(new),
        message=f"{node}: {len(new)} Xid(s) during the burn-in: {listed}",
        remedy=REMEDY_XID,
    )


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "min": round(min(values), 3),
        "median": round(float(statistics.median(values)), 3),
        "max": round(max(values), 3),
    }


def summary(
    samples: Sequence[Sample], series: Mapping[str, Sequence[tuple[float, float]]]
) -> list[dict[str, Any]]:
    """Per device: how many samples, clocks, temperature, power (min/median/max), the
    reasons seen, and the matmul figure's first and last third."""
    out = []
    by_gpu = _by_gpu(samples)
    for dev in sorted(set(by_gpu) | set(series)):
        mine = by_gpu.get(dev, [])
        bits = 0
        for s in mine:
            bits |= s.reasons or 0
        values = [v for _, v in sorted(series.get(dev, [])) if v > 0]
        out.append(
            {
                "device": dev,
                "samples": len(mine),
                "sm_clock_mhz": _stats(
                    [s.sm_clock_mhz for s in mine if s.sm_clock_mhz is not None]
                ),
                "temperature_c": _stats(
                    [s.temperature_c for s in mine if s.temperature_c is not None]
                ),
                "power_w": _stats([s.power_w for s in mine if s.power_w is not None]),
                "reasons": reason_names(bits),
                "intervals": len(values),
                "tflops_first": round(_third(values, False), 4) if values else None,
                "tflops_last": round(_third(values, True), 4) if values else None,
            }
        )
    return out
