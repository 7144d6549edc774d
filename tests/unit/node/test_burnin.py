"""gpufleet.node.burnin (the verdicts of a held load) and gpufleet.node.gpu_sampler (NVML
read through a fake pynvml)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gpufleet.node import burnin, xid
from gpufleet.node.gpu_sampler import NvmlSampler
from nvml_fakes import FakeNVMLError, fake_pynvml


def samples(gpu: str, reasons: list[int]) -> list[burnin.Sample]:
    return [burnin.Sample(float(i * 5), gpu, 1980, 61, 690.0, r) for i, r in enumerate(reasons)]


def test_idle_and_the_software_power_cap_pass_hardware_slowdown_fails() -> None:
    got = {
        r.gpu: r
        for r in burnin.judge_throttle(
            "n1", [*samples("0", [0x0, 0x4, 0x1, 0x4]), *samples("1", [0x0, 0x4, 0x8 | 0x40, 0x0])]
        )
    }
    assert got["0"].status == "pass"
    bad = got["1"]
    assert bad.status == "fail" and bad.value == "0x48"
    assert "hardware slowdown" in bad.message and "hardware thermal slowdown" in bad.message
    assert "1 of 4 samples, first at 10 s" in bad.message and bad.remedy


def test_no_reasons_from_nvml_is_a_skip() -> None:
    (rec,) = burnin.judge_throttle("n1", [*samples("0", []), burnin.Sample(0.0, "0")])
    assert rec.status == "skip" and "no clock-event reasons" in rec.message


def test_a_figure_that_falls_more_than_the_tolerance_fails() -> None:
    steady = [(t, 790.0 - t * 0.01) for t in range(0, 60, 5)]  # 1 % over the run
    heat_soak = [(t, 790.0 if t < 20 else 640.0) for t in range(0, 60, 5)]  # 19 % lower at the end
    got = {r.gpu: r for r in burnin.judge_drop("n1", {"0": steady, "1": heat_soak}, 0.10)}
    assert got["0"].status == "pass"
    assert got["1"].status == "fail" and got["1"].value == round(1 - 640 / 790, 4)
    assert "a fall of more than 10% fails" in got["1"].message


def test_one_interval_shows_no_trend() -> None:
    (rec,) = burnin.judge_drop("n1", {"cpu": [(5.0, 0.03)]}, 0.5)
    assert rec.status == "skip" and rec.gpu is None and "raise DURATION" in rec.message


def test_only_an_xid_after_the_start_fails() -> None:
    start = datetime(2026, 12, 6, 10, 0, tzinfo=timezone.utc)
    lines = [
        "2026-12-06T09:40:00+0000 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        "2026-12-06T10:05:00+0000 node kernel: NVRM: Xid (PCI:0000:5d:00): 48, pid=2, DBE.",
    ]
    rec = burnin.judge_xid("n1", xid.parse(lines), start)
    assert rec.status == "fail" and rec.value == 1
    assert "Xid 48 on 0000:5d:00" in rec.message and "critical" in rec.message
    assert burnin.judge_xid("n1", xid.parse(lines[:1]), start).status == "pass"
    unread = burnin.judge_xid("n1", [], start, "journalctl: rc=1")
    assert unread.status == "skip" and "could not be read" in unread.message


def test_the_summary_condenses_each_device() -> None:
    (one,) = burnin.summary(samples("0", [0x0, 0x4, 0x1]), {"0": [(5.0, 790.0), (10.0, 780.0)]})
    assert one["samples"] == 3 and one["sm_clock_mhz"] == {"min": 1980, "median": 1980, "max": 1980}
    assert one["reasons"] == ["GPU idle", "software power cap"]
    assert one["tflops_first"] == 790.0 and one["tflops_last"] == 780.0


def test_the_sampler_reads_clock_temperature_power_and_reasons() -> None:
    def unsupported(*_: Any) -> int:
        raise FakeNVMLError(3)

    nvml = fake_pynvml(
        nvmlDeviceGetClockInfo=lambda h, kind: 1980 if kind == 1 else 0,
        nvmlDeviceGetTemperature=lambda h, sensor: 60 + h,
        nvmlDeviceGetPowerUsage=lambda h: 690000 if h == 0 else unsupported(),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 if h == 0 else 0x40,
    )
    got = NvmlSampler(nvml).sample(12.5)
    assert [(s.gpu, s.sm_clock_mhz, s.temperature_c, s.power_w, s.reasons) for s in got] == [
        ("0", 1980, 60, 690.0, 0x4),
        ("1", 1980, 61, None, 0x40),
    ]
    assert {s.t for s in got} == {12.5}
