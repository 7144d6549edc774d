"""gpufleet.node.nvml: the real nvidia-ml-py on this GPU-less machine, a fake pynvml for the
reader's error mapping, and recordings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checks_helpers import RECORDINGS, REPO, run_suite
from gpufleet.node import nvml
from gpufleet.node.nvml import NvmlUnavailable, PynvmlReader, RecordedReader
from nvml_fakes import FakeNVMLError, fake_pynvml

pynvml = pytest.importorskip("pynvml")


def _has_real_driver() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


no_driver_here = pytest.mark.skipif(_has_real_driver(), reason="this machine has an NVIDIA driver")


# ------------------------------------------------------------------ real nvidia-ml-py, no GPU


@no_driver_here
def test_real_pynvml_reports_no_driver() -> None:
    reader = PynvmlReader()
    with pytest.raises(NvmlUnavailable) as info:
        reader.read()
    assert info.value.code == nvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert info.value.no_driver
    assert "libnvidia-ml.so.1" in str(info.value)
    assert "nvidia_driver" in info.value.remedy


@no_driver_here
def test_real_suite_without_driver_skips_with_reason(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "--no-require-gpu")
    assert run.rc == 0, run.out
    rec = run.find("driver_loaded")
    assert rec["status"] == "skip"
    assert rec["message"] == "no NVIDIA driver (NVML library libnvidia-ml.so.1 not found)"
    assert rec["value"] == 12
    assert run.data["meta"]["nvml_recording"] is None
    assert not [r for r in run.records if r["status"] == "fail"]


# slow: a 2nd real-torch suite run; test_checks_suite has the no-driver fail case
@pytest.mark.slow
@no_driver_here
def test_real_suite_without_driver_fails_when_required(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "--require-gpu")
    assert run.rc == 1
    assert run.find("driver_loaded")["status"] == "fail"
    assert run.find("persistence_mode")["status"] == "fail"  # the no-driver parameter


@no_driver_here
def test_record_cli_writes_the_error(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "nvml", "record", "--output", str(out)],
        capture_output=True, text=True, check=False, env={"PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert proc.returncode == 1
    data = json.loads(out.read_text())
    assert data["nvml"]["error"] == 12
    with pytest.raises(NvmlUnavailable) as info:
        RecordedReader(data).read()
    assert info.value.no_driver


# ------------------------------------------------------------------ fake pynvml


def test_pynvml_reader_maps_readings() -> None:
    reading = PynvmlReader(fake_pynvml()).read()
    assert reading.driver_version == "570.133.20"
    assert reading.cuda_driver_version_str == "12.8"
    g0, g1 = reading.gpus
    assert g0.pci_bus_id == "00000000:18:00.0"
    assert g0.label == "0 (00000000:18:00.0)"
    assert g0.compute_capability == (9, 0)
    assert g0.persistence_mode is True
    assert (g0.ecc_enabled, g0.ecc_volatile_uncorrected, g0.ecc_aggregate_uncorrected) == (
        True, 0, 3,
    )  # fmt: skip
    assert g0.retired_pages_sbe is None  # NOT_SUPPORTED → None
    assert g0.remapped_rows_uncorrectable == 1
    assert g0.remapped_rows_pending is False
    assert g0.nvlink == ((0, True), (1, True), (2, False), (3, True))  # absent links dropped
    assert g0.clock_event_reasons == 0x41  # FUNCTION_NOT_FOUND → deprecated throttle name
    assert (g0.pcie_gen_current, g0.pcie_gen_max) == (1, 5)
    assert g1.ecc_enabled is None
    assert g1.remapped_rows_failure is None
    assert g1.nvlink == ()


def test_pynvml_reader_old_bindings_use_throttle_name() -> None:
    lib = fake_pynvml()
    del lib.nvmlDeviceGetCurrentClocksEventReasons
    assert PynvmlReader(lib).read().gpus[0].clock_event_reasons == 0x41


def test_pynvml_reader_gpu_lost_is_per_gpu() -> None:
    def name(h: int) -> str:
        if h == 1:
            raise FakeNVMLError(nvml.NVML_ERROR_GPU_IS_LOST)
        return "NVIDIA H100 80GB HBM3"

    reading = PynvmlReader(fake_pynvml(nvmlDeviceGetName=name)).read()
    lost = reading.gpus[1]
    assert lost.error_code == 15
    assert lost.error is not None
    assert "GPU is lost" in lost.error
    assert lost.pci_bus_id == "00000000:19:00.0"  # still named
    assert reading.gpus[0].error is None


@pytest.mark.parametrize(
    ("code", "no_driver", "remedy"),
    [
        (12, True, "install the NVIDIA driver"),
        (9, True, "modprobe nvidia"),
        (18, False, "reboot"),
        (4, False, "container_use_devices"),
    ],
)
def test_pynvml_reader_init_errors(code: int, no_driver: bool, remedy: str) -> None:
    def fail() -> None:
        raise FakeNVMLError(code)

    with pytest.raises(NvmlUnavailable) as info:
        PynvmlReader(fake_pynvml(nvmlInit=fail)).read()
    assert info.value.code == code
    assert info.value.no_driver is no_driver
    assert remedy in info.value.remedy


def test_pynvml_reader_unexpected_error_is_not_swallowed() -> None:
    def boom(h: int) -> int:
        raise FakeNVMLError(999)

    reading = PynvmlReader(fake_pynvml(nvmlDeviceGetPersistenceMode=boom)).read()
    assert reading.gpus[0].error_code == 999  # the GPU fails visibly, not silently None


# ------------------------------------------------------------------ recordings


def test_every_recording_loads_and_roundtrips() -> None:
    files = sorted(RECORDINGS.glob("*.json"))
    assert len(files) >= 30
    for path in files:
        data = nvml.load_recording(path)
        reader = RecordedReader(data)
        if "error" in data["nvml"]:
            with pytest.raises(NvmlUnavailable):
                reader.read()
            continue
        reading = reader.read()
        again = nvml.NodeReading.from_dict(json.loads(json.dumps(reading.to_dict())))
        assert again == reading, path.name


def test_recording_rejects_unknown_keys(tmp_path: Path) -> None:
    data = nvml.load_recording(RECORDINGS / "healthy-h100x8.json")
    data["nvml"]["gpus"][0]["pcie_speed"] = 5
    with pytest.raises(ValueError, match="pcie_speed"):
        RecordedReader(data).read()


def test_recording_after_load() -> None:
    reader = RecordedReader.from_file(RECORDINGS / "pcie-gen-idle-recovers.json")
    assert reader.read().gpus[7].pcie_gen_current == 1
    assert reader.has_after_load(7)
    assert not reader.has_after_load(0)
    assert reader.reread_gpu(7).pcie_gen_current == 5


def test_cuda_int_to_str() -> None:
    assert nvml.cuda_int_to_str(12020) == "12.2"
    assert nvml.cuda_int_to_str(13000) == "13.0"
    assert nvml.cuda_int_to_str(11080) == "11.8"
    assert nvml.cuda_int_to_str(None) is None


# ------------------------------------------------------------------ the real reader path


FAKE_PYNVML = REPO / "tests" / "fixtures" / "fake_pynvml"


def test_suite_through_pynvml_reader(tmp_path: Path) -> None:
    """No recording: the suite's real path (PynvmlReader → health) over a stand-in pynvml."""
    env = {"PYTHONPATH": f"{FAKE_PYNVML}:{REPO / 'src'}"}
    run = run_suite(tmp_path, "--node=fake-a100", "--no-pcie-load", env=env)
    assert run.data["meta"]["driver"] == "550.54.15"
    assert run.data["meta"]["cuda_driver"] == "12.4"
    assert run.data["mode"] == "gpu"
    assert run.find("driver_loaded")["status"] == "pass"
    assert run.find("persistence_mode", 0)["status"] == "pass"
    remap = run.find("row_remap", 1)
    assert remap["status"] == "fail"
    assert remap["gpu"] == "1 (00000000:47:00.0)"
    assert "row remap is pending" in remap["message"]
    link = run.find("nvlink", 1)
    assert link["status"] == "fail"
    assert "1 of 12 NVLink" in link["message"]
    assert run.find("nvlink", 0)["status"] == "pass"
    pcie = run.find("pcie_link", 0)
    assert pcie["status"] == "warn"
    assert "idle downshift, re-check under load" in pcie["message"]
    assert run.find("page_retirement", 0)["status"] == "skip"
    assert run.rc == 1


# slow: a real-torch suite run; test_pynvml_reader_init_errors maps init errors
@pytest.mark.slow
def test_suite_through_pynvml_reader_init_error(tmp_path: Path) -> None:
    env = {"PYTHONPATH": f"{FAKE_PYNVML}:{REPO / 'src'}", "FAKE_PYNVML_INIT_ERROR": "9"}
    run = run_suite(tmp_path, "--no-require-gpu", env=env)
    assert run.rc == 0
    rec = run.find("driver_loaded")
    assert rec["status"] == "skip"
    assert rec["message"] == "no NVIDIA driver (NVIDIA kernel driver not loaded)"


FAKE_TORCH = REPO / "tests" / "fixtures" / "fake_torch"


@pytest.mark.parametrize(
    "slow",
    [
        pytest.param(False, id="fast-upshift"),
        # slow: the same recheck with a late upshift; fast-upshift stays in make test
        pytest.param(True, id="slow-upshift", marks=pytest.mark.slow),
    ],
)
def test_pcie_idle_downshift_is_rechecked_under_load(tmp_path: Path, slow: bool) -> None:
    """Idle GPUs at Gen1 are loaded through (fake) torch and pass at Gen4 under load."""
    env = {"PYTHONPATH": f"{FAKE_PYNVML}:{FAKE_TORCH}:{REPO / 'src'}"}
    if slow:
        env["FAKE_TORCH_SLOW_UPSHIFT"] = "1"
    run = run_suite(tmp_path, "--node=fake-a100", "--expected-gpus=2", env=env)
    for index in (0, 1):
        rec = run.find("pcie_link", index)
        assert rec["status"] == "pass", rec
        assert "Gen4 x16, max Gen4 x16 under load" in rec["message"]
    assert run.data["meta"]["pcie_load_rechecks"] == [
        "0 (00000000:07:00.0)",
        "1 (00000000:47:00.0)",
    ]
    assert "pcie_load_errors" not in run.data["meta"]
    assert run.find("torch_arch_list", 0)["status"] == "pass"
    assert run.find("torch_device_count")["status"] == "pass"


# slow: two real torch imports; make test keeps test_record_cli_writes_the_error
@pytest.mark.slow
@no_driver_here
def test_full_recording_replays_through_the_suite(tmp_path: Path) -> None:
    rec = tmp_path / "node.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "nvml", "record", "--full", "-o", str(rec)],
        capture_output=True, text=True, check=False, env={"PYTHONPATH": str(REPO / "src")},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    data = json.loads(rec.read_text())
    assert data["nvml"]["error"] == 12
    assert set(data) >= {"torch", "proc_modules", "pci_nvidia_gpus", "nvcc", "kernel_log"}
    assert data["torch"]["cuda_available"] is False
    run = run_suite(tmp_path, f"--nvml-recording={rec}", "--no-require-gpu")
    assert run.rc == 0, run.out
    assert run.find("driver_loaded")["status"] == "skip"
    assert run.data["meta"]["torch"] == data["torch"]["version"]
