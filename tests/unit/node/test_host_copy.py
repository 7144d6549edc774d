"""The node check host_device_copy: the judging (gpufleet.node.health.host_copy) on plain numbers
at its edges, the pure parts of the measurement (gpufleet.node.health.host_copy_bench), and the
registry's wiring: the profile's floor, a CPU node's skip, a recording's skip."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.node import facts as nodefacts
from gpufleet.node.health import check_registry as registry
from gpufleet.node.health import host_copy, host_copy_bench, names
from gpufleet.node.health.context import NodeContext
from gpufleet.node.health.host_copy import CopyFigure, host_device_copy
from gpufleet.node.nvml import GpuReading, RecordedReader, load_recording

GPU = GpuReading(index=3, pci_bus_id="00000000:5D:00.0", name="NVIDIA H100 80GB HBM3")
MIB128 = 128 << 20
CHECK = next(c for c in registry.CHECKS if c.name == names.HOST_DEVICE_COPY)


def fig(h2d: float, d2h: float, numa_local: bool | None = True) -> CopyFigure:
    return CopyFigure(h2d_gbs=h2d, d2h_gbs=d2h, size_bytes=MIB128, repeats=5,
                      numa_local=numa_local)  # fmt: skip


# ------------------------------------------------------------------ judging: plain numbers


def test_at_the_floor_passes_with_the_figure_and_the_floor() -> None:
    r = host_device_copy(GPU, fig(55.0, 52.0), 52.0, "hgx-h100-8gpu")
    assert (r.status, r.value, r.threshold, r.gpu) == ("pass", 52.0, 52.0, GPU.label)
    assert "H2D 55.0 GB/s, D2H 52.0 GB/s" in r.message
    assert "min 52.0 GB/s >= floor 52 GB/s (profile hgx-h100-8gpu)" in r.message


def test_just_below_the_floor_fails_naming_the_gpu_and_the_remedy() -> None:
    r = host_device_copy(GPU, fig(55.0, 51.99), 52.0, "hgx-h100-8gpu")
    assert (r.status, r.value, r.threshold) == ("fail", 51.99, 52.0)
    assert r.message.startswith("GPU 3 (00000000:5D:00.0): ")
    assert "below the floor 52 GB/s" in r.message
    for what in ("reseat", "PCIe link width and generation", "pcie_link", "NUMA"):
        assert what in r.remedy, what


def test_the_lower_direction_is_judged() -> None:
    """H2D far above, D2H below: the node fails on D2H (min of the two)."""
    assert host_device_copy(GPU, fig(60.0, 30.0), 52.0, "hgx-h100-8gpu").status == "fail"
    assert host_device_copy(GPU, fig(30.0, 60.0), 52.0, "hgx-h100-8gpu").status == "fail"


@pytest.mark.parametrize("numa_local", [None, False])
def test_below_the_floor_without_numa_pinning_warns_to_rerun_pinned(
    numa_local: bool | None,
) -> None:
    r = host_device_copy(GPU, fig(40.0, 41.0, numa_local), 52.0, "hgx-h100-8gpu")
    assert r.status == "warn"
    assert "numactl" in r.remedy and "pcie_link" in r.remedy
    # above the floor, pinning does not matter
    assert host_device_copy(GPU, fig(60.0, 60.0, numa_local), 52.0, "p").status == "pass"


def test_a_null_floor_records_the_figure_and_passes() -> None:
    r = host_device_copy(GPU, fig(20.0, 21.0), None, "pcie-l40s-8gpu")
    assert (r.status, r.value, r.threshold) == ("pass", 20.0, None)
    assert r.message.endswith("no floor in profile pcie-l40s-8gpu")


def test_no_profile_chosen_records_the_figure_and_passes_unjudged() -> None:
    r = host_device_copy(GPU, fig(20.0, 21.0), None, None)
    assert (r.status, r.value) == ("pass", 20.0)
    assert "no system profile chosen" in r.message


def test_no_figure_is_a_skip_with_the_reason_never_a_pass() -> None:
    r = host_device_copy(GPU, None, 52.0, "hgx-h100-8gpu", why_not="torch has no CUDA")
    assert (r.status, r.value) == ("skip", None)
    assert "not measured: torch has no CUDA" in r.message


def test_a_gpu_nvml_cannot_read_fails_as_every_per_gpu_check() -> None:
    lost = GpuReading(index=3, pci_bus_id=GPU.pci_bus_id, error="GPU is lost", error_code=15)
    r = host_device_copy(lost, fig(60.0, 60.0), 52.0, "hgx-h100-8gpu")
    assert r.status == "fail" and "NVML cannot read this GPU" in r.message


def test_a_failed_measurement_is_incomplete() -> None:
    r = host_copy.measurement_failed(GPU, "OutOfMemoryError: CUDA out of memory")
    assert r.status == "incomplete" and r.remedy
    assert "CUDA out of memory" in r.message


# ------------------------------------------------------------------ measuring: pure parts


def test_gbs_is_decimal_gigabytes_per_second() -> None:
    assert host_copy.gbs(MIB128, 0.0025) == pytest.approx(53.6870912)
    with pytest.raises(ValueError, match="cannot take"):
        host_copy.gbs(MIB128, 0.0)


def test_the_figure_is_the_median_of_the_repeats_per_direction() -> None:
    f = host_copy_bench.figure_from_times(
        MIB128, [0.0025, 0.010, 0.0026, 0.0024, 0.0025], [0.003, 0.003, 0.1, 0.003, 0.003], True
    )
    assert f.h2d_gbs == pytest.approx(MIB128 / 0.0025 / 1e9)  # the outlier 10 ms is ignored
    assert f.d2h_gbs == pytest.approx(MIB128 / 0.003 / 1e9)
    assert f.gbs == f.d2h_gbs and f.repeats == 5 and f.numa_local is True


@pytest.mark.parametrize(
    ("nvml", "sysfs"),
    [("00000000:3B:00.0", "0000:3b:00.0"), ("0000:db:00.0", "0000:db:00.0"),
     ("3b:00.1", "0000:3b:00.1"), ("bogus", None)],
)  # fmt: skip
def test_sysfs_name_of_an_nvml_bus_id(nvml: str, sysfs: str | None) -> None:
    assert host_copy_bench.sysfs_name(nvml) == sysfs


def test_local_cpus_from_the_gpus_sysfs_entry(tmp_path: Path) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    (tmp_path / "0000:3b:00.0" / "local_cpulist").write_text("0-3,8,10-11\n")
    assert host_copy_bench.local_cpus("00000000:3B:00.0", tmp_path) == {0, 1, 2, 3, 8, 10, 11}
    assert host_copy_bench.local_cpus("00000000:5D:00.0", tmp_path) is None  # no entry


def test_pinning_restores_the_affinity_and_says_whether_it_pinned() -> None:
    before = os.sched_getaffinity(0)
    one = {min(before)}
    with host_copy_bench.pinned_to(one) as pinned:
        assert pinned is True and os.sched_getaffinity(0) == one
    assert os.sched_getaffinity(0) == before
    with host_copy_bench.pinned_to(None) as pinned:
        assert pinned is None and os.sched_getaffinity(0) == before


# ------------------------------------------------------------------ the registry's wiring


def _live(recording: str, **torch: Any) -> NodeContext:
    """A context read as on a live node (no recording) from ``recording``'s NVML readings,
    with its torch facts (changed by ``torch``)."""
    rec = load_recording(RECORDINGS / f"{recording}.json")
    ctx = NodeContext.open({}, MANIFEST, RecordedReader(rec), None)
    ctx._torch = nodefacts.TorchFacts.from_dict({**rec["torch"], **torch})
    return ctx


def test_the_check_is_a_per_gpu_verify_check_of_the_profile_family() -> None:
    assert (CHECK.scope, CHECK.tiers, CHECK.family) == ("gpu", frozenset({"verify"}), "profile")
    assert CHECK in registry.suite_family("profile")


@pytest.mark.parametrize("recording", ["no-driver", "driver-not-loaded"])
def test_a_node_without_a_gpu_skips_with_the_reason(recording: str) -> None:
    rec = load_recording(RECORDINGS / f"{recording}.json")
    ctx = NodeContext.open({"require_gpu": False}, None, RecordedReader(rec), rec)
    (r,) = registry.suite_records(CHECK, ctx)
    assert r.status == "skip" and r.message.startswith("no NVIDIA driver"), r


def test_a_gpu_node_whose_torch_has_no_cuda_skips_every_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: object, **__: object) -> CopyFigure:
        raise AssertionError("measured without CUDA")

    monkeypatch.setattr(host_copy_bench, "measure", never)
    ctx = _live("healthy-h100x8", cuda_available=False, cuda=None, version="2.11.0+cpu")
    records = list(registry.suite_records(CHECK, ctx))
    assert len(records) == 8
    assert {r.status for r in records} == {"skip"}
    assert "torch 2.11.0+cpu cannot use CUDA here" in records[0].message


def test_a_recording_skips_it_holds_no_copy_figure() -> None:
    rec = load_recording(RECORDINGS / "healthy-h100x8.json")
    ctx = NodeContext.open({}, MANIFEST, RecordedReader(rec), rec)
    records = list(registry.suite_records(CHECK, ctx))
    assert {r.status for r in records} == {"skip"}
    assert "NVML recording holds no copy figure" in records[0].message


def test_the_h100_profiles_floor_judges_the_measured_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The floor is hgx-h100-8gpu's floors.host_device_copy_gbs (52 GB/s at 128 MiB); GPU 2
    copies at 30 GB/s and fails, the others pass; the figures go into the meta."""
    asked: list[tuple[int, str, int]] = []

    def measure(index: int, bus: str, size: int) -> CopyFigure:
        asked.append((index, bus, size))
        return fig(30.0, 31.0) if index == 2 else fig(55.5, 54.0)

    monkeypatch.setattr(host_copy_bench, "measure", measure)
    ctx = _live("healthy-h100x8")
    records = list(registry.suite_records(CHECK, ctx))
    assert [r.status for r in records] == ["pass", "pass", "fail", *["pass"] * 5]
    assert {r.threshold for r in records} == {52.0}
    assert "profile hgx-h100-8gpu" in records[2].message
    assert asked[2] == (2, "00000000:3A:00.0", MIB128)  # torch device by PCI bus id
    assert [m["gbs"] for m in ctx.meta["host_device_copy"]][:3] == [54.0, 54.0, 30.0]


def test_a_measurement_that_raises_is_incomplete(monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(*_: object, **__: object) -> CopyFigure:
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(host_copy_bench, "measure", oom)
    records = list(registry.suite_records(CHECK, _live("healthy-h100x8")))
    assert {r.status for r in records} == {"incomplete"}
    assert "RuntimeError: CUDA out of memory" in records[0].message


def test_a_lost_gpu_fails_unmeasured_and_the_others_are_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[int] = []

    def measure(index: int, bus: str, size: int) -> CopyFigure:
        asked.append(index)
        return fig(55.0, 55.0)

    monkeypatch.setattr(host_copy_bench, "measure", measure)
    records = list(registry.suite_records(CHECK, _live("gpu-lost")))
    assert [r.status for r in records] == [*["pass"] * 3, "fail", *["pass"] * 4]
    assert "NVML cannot read this GPU" in records[3].message
    assert 3 not in asked and len(asked) == 7
