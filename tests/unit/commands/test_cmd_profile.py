"""``gpufleet profile show`` and ``gpufleet profile diff`` through gpufleet.cli.main: output,
exit codes (0 nothing fails, 1 a finding fails or NVML is broken, 2 refused), the result
file, and where the HCA ports come from (--ib-sysfs, the recording, or not compared)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.profiles import degraded as DEGRADED
from gpufleet.cli import main
from gpufleet.results import load_result_file

REPO = Path(__file__).resolve().parents[3]
NVML = REPO / "tests" / "fixtures" / "nvml"


RECORDINGS: dict[str, dict[str, Any]] = DEGRADED.recordings()


def save(tmp_path: Path, rec: dict[str, Any], name: str = "node") -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(rec), encoding="utf-8")
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["profile", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_show_lists_every_profile_and_the_inventory_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = run(capsys, "show")
    assert rc == 0
    for name in ("hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-a100-80gb-8gpu", "pcie-l40s-8gpu",
                 "simulated-cpu"):  # fmt: skip
        assert any(line.startswith(name + " ") for line in out.splitlines()), out
    assert "gpufleet_system_profile" in out


def test_show_name_prints_figures_with_their_sources(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "show", "hgx-h200-8gpu")
    assert rc == 0
    lines = out.splitlines()
    floor = next(i for i, line in enumerate(lines) if "floors.allreduce_busbw_gbs" in line)
    assert "431.0 GB/s at 16 GiB" in lines[floor]
    assert "conf/nd96isr_h200_v5.conf" in lines[floor + 1]


def test_show_an_unknown_name_is_refused_with_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, err = run(capsys, "show", "h100")
    assert rc == 2 and out == ""
    assert "unknown system profile 'h100'" in err and "hgx-h100-8gpu" in err


def test_diff_healthy_recording_with_ib_sysfs_is_clean_and_writes_a_result_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = RECORDINGS["healthy-h100x8-ib"]
    sysfs = DEGRADED.write_ib_sysfs(tmp_path / "ib", rec["infiniband"])
    result = tmp_path / "profile.json"
    rc, out, _ = run(
        capsys, "diff", "--nvml-recording", save(tmp_path, DEGRADED.without_ib(rec)),
        "--ib-sysfs", str(sysfs), "--json", str(result),
    )  # fmt: skip
    assert rc == 0
    assert "gpu-h100-01 against profile hgx-h100-8gpu" in out and "no difference" in out
    assert "not compared" not in out
    written = load_result_file(result)
    assert (written.kind, written.node, written.records) == ("profile", "gpu-h100-01", [])
    assert written.meta == {
        "profile": "hgx-h100-8gpu",
        "profile_file": "data/profiles/hgx-h100-8gpu.json",
        "ib_compared": True,
    }


@pytest.mark.parametrize("name", [n for n in RECORDINGS if "expect" in RECORDINGS[n]])
def test_diff_each_degraded_recording_exits_1_with_its_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    rec = RECORDINGS[name]
    result = tmp_path / "profile.json"
    rc, out, _ = run(capsys, "diff", "--nvml-recording", save(tmp_path, rec), "--json", str(result))
    finding, status, gpu = rec["expect"]
    assert rc == 1
    assert f"  {status.upper():5} {finding}: " in out
    assert "1 finding(s)" in out
    records = load_result_file(result).records
    assert [(r.name, r.status, r.gpu) for r in records] == [(finding, status, gpu)]


def test_ib_sysfs_overrides_the_recordings_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    half = RECORDINGS["ib-half-rate"]
    sysfs = DEGRADED.write_ib_sysfs(tmp_path / "ib", DEGRADED.healthy_ib())
    rc, out, _ = run(
        capsys, "diff", "--nvml-recording", save(tmp_path, half), "--ib-sysfs", str(sysfs)
    )
    assert rc == 0 and "no difference" in out


def test_a_recording_without_ports_says_they_were_not_compared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "diff", "--nvml-recording", str(NVML / "healthy-h100x8.json"))
    assert rc == 0
    assert "HCA ports not compared" in out and "--ib-sysfs" in out


def test_the_real_h200_recording_is_detected_and_fails_on_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = run(capsys, "diff", "--nvml-recording", str(NVML / "real-h200x1.json"))
    assert rc == 1
    assert "against profile hgx-h200-8gpu" in out and "detected" in out
    assert "FAIL  profile_gpu_count: GPU count" in out and "expected 8, found 1" in out


def test_a_named_profile_overrides_auto(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = RECORDINGS["healthy-h100x8-ib"]
    rc, out, _ = run(
        capsys, "diff", "--profile", "hgx-a100-80gb-8gpu", "--nvml-recording", save(tmp_path, rec)
    )
    assert rc == 1
    assert "against profile hgx-a100-80gb-8gpu" in out and "named" in out
    assert "expected NVIDIA A100-SXM4-80GB, found NVIDIA H100 80GB HBM3" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--profile", "nope"), "unknown system profile 'nope'"),
        (("--ib-sysfs", "/no/such/dir"), "--ib-sysfs /no/such/dir: not a directory"),
    ],
)
def test_refused_input_exits_2_in_one_error_paragraph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    rec = save(tmp_path, RECORDINGS["healthy-h100x8-ib"])
    rc, out, err = run(capsys, "diff", "--nvml-recording", rec, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("ERROR: ") and says in err and err.count("\n") == 1


def test_an_unknown_gpu_model_under_auto_exits_2_saying_what_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = copy.deepcopy(RECORDINGS["healthy-h100x8-ib"])
    for gpu in rec["nvml"]["gpus"]:
        gpu["name"] = "NVIDIA B200"
    rc, _, err = run(capsys, "diff", "--nvml-recording", save(tmp_path, rec))
    assert rc == 2
    assert "no profile lists the GPU model(s) of this node: NVIDIA B200" in err
    assert "gpufleet_system_profile" in err


@pytest.mark.parametrize(
    ("pci_gpus", "rc", "says"),
    [
        (0, 0, "against profile simulated-cpu"),
        (8, 2, "PCI bus lists 8 NVIDIA GPU(s)"),
    ],
)
def test_no_driver_is_the_cpu_node_unless_the_pci_bus_has_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pci_gpus: int, rc: int, says: str
) -> None:
    rec = {"schema": 1, "node": "n1", "nvml": {"error": 12}, "pci_nvidia_gpus": pci_gpus}
    got, out, err = run(capsys, "diff", "--nvml-recording", save(tmp_path, rec))
    assert got == rc and says in out + err


def test_a_broken_driver_exits_1_with_its_remedy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = {"schema": 1, "node": "n1", "nvml": {"error": 18}}
    rc, _, err = run(capsys, "diff", "--nvml-recording", save(tmp_path, rec))
    assert rc == 1
    assert "version mismatch" in err and "reboot the node" in err
