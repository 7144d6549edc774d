"""gpufleet.node.dcgm.run_diag and ``gpufleet dcgm diag``: a scripted ``dcgmi`` (a shell script
printing the recorded JSON fixture, or sleeping past the limit) stands in for DCGM, which
this machine does not have. Proves: the records come from dcgmi's JSON, the time bound
kills a hung dcgmi, a missing dcgmi fails with the install remedy, the package names."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.node import dcgm

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm" / "diag-r1-gpu3-memory.json"


def fake_dcgmi(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "dcgmi"
    exe.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    exe.chmod(0o755)
    return exe


def test_records_come_from_dcgmi_json(tmp_path: Path) -> None:
    exe = fake_dcgmi(tmp_path, f'echo "args: $*" >&2\ncat {FIXTURE}\nexit 226')
    run = dcgm.run_diag(1, 30, str(exe))
    by_name = {r.name: r for r in run.records}
    assert by_name["dcgm_gpu_memory"].status == "fail"
    assert by_name["dcgm_nvml_library"].status == "pass"
    assert run.returncode == 226
    assert "args: diag -r 1 -j" in run.output


def test_hung_dcgmi_is_killed_at_the_limit(tmp_path: Path) -> None:
    exe = fake_dcgmi(tmp_path, "sleep 30")
    start = time.monotonic()
    run = dcgm.run_diag(2, 0.5, str(exe))
    assert time.monotonic() - start < 10
    (rec,) = run.records
    assert rec.name == "dcgm_diag" and rec.status == "incomplete"
    assert "did not finish within 0.5 s" in rec.message
    assert "verify_dcgm_timeout" in rec.remedy


def test_missing_dcgmi_is_incomplete_with_the_install_remedy(tmp_path: Path) -> None:
    (rec,) = dcgm.run_diag(1, 5, str(tmp_path / "nope")).records
    assert rec.status == "incomplete" and "not installed" in rec.message
    assert "gpufleet_dcgm: true" in rec.remedy


def test_level_outside_1_to_4_is_refused() -> None:
    with pytest.raises(ValueError, match="choose one of 1, 2, 3, 4"):
        dcgm.run_diag(5, 1)


def test_package_names() -> None:
    assert dcgm.packages(4, "13.0") == ["datacenter-gpu-manager-4-cuda13"]
    assert dcgm.packages(4, "12.8") == ["datacenter-gpu-manager-4-cuda12"]
    assert dcgm.packages(3, None) == ["datacenter-gpu-manager"]
    with pytest.raises(ValueError, match="cpu wheel"):
        dcgm.packages(4, None)


def test_cli_writes_a_result_file(tmp_path: Path) -> None:
    """The command verify runs. This machine has no NVIDIA GPU on its PCI bus, so the CLI
    must answer with its skip record, not run dcgmi (nodefacts reads the real sysfs)."""
    exe = fake_dcgmi(tmp_path, f"cat {FIXTURE}")
    out = tmp_path / "dcgm.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "dcgm", "diag", "--level", "1", "--timeout", "5",
         "--node", "n1", "--output", str(out), "--log", str(tmp_path / "dcgm.log"),
         "--dcgmi", str(exe)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    from gpufleet.node.facts import pci_nvidia_gpus

    data = json.loads(out.read_text())
    assert data["kind"] == "dcgm" and data["node"] == "n1"
    assert data["meta"]["level"] == 1
    if pci_nvidia_gpus() == 0:
        assert proc.returncode == 0, proc.stderr
        assert [r["status"] for r in data["records"]] == ["skip"]
    else:  # a machine with a GPU runs the scripted dcgmi: the fixture has one failing test
        assert proc.returncode == 1
        assert {r["name"] for r in data["records"]} >= {"dcgm_gpu_memory"}


def test_cli_refuses_a_bad_level() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "dcgm", "diag", "--level", "0", "--output", "x"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--level" in proc.stderr


def test_cli_exits_3_when_dcgm_could_not_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU node without dcgmi: one incomplete record and exit 3 (not a GPU failure)."""
    import argparse

    from gpufleet.commands import cmd_dcgm
    from gpufleet.node import facts

    monkeypatch.setattr(facts, "pci_nvidia_gpus", lambda: 8)
    out = tmp_path / "dcgm.json"
    args = argparse.Namespace(
        level=1, timeout=5.0, node="n1", output=str(out), log=None, dcgmi=str(tmp_path / "nope")
    )
    assert cmd_dcgm.run(args) == 3
    assert [r["status"] for r in json.loads(out.read_text())["records"]] == ["incomplete"]
