"""Every warn, fail and incomplete verdict says what to do: each node check runs over every
recorded node state (the healthy and degraded NVML recordings, the HGX recordings with their
fabric faults) and each record that is not a pass or a skip must carry a non-empty remedy.

The checks are walked through the same verdict functions gpufleet health (fast_checks) and the
checks suite (checks/) call, with the facts taken from the recording."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import FIXTURES, MANIFEST, RECORDINGS
from gpufleet.node import fast_checks, health
from gpufleet.node import ib_ports as ibports
from gpufleet.node import nvswitch as fabric
from gpufleet.node.facts import TorchFacts, visible_devices
from gpufleet.node.nvml import NvmlUnavailable, RecordedReader, load_recording
from gpufleet.results import NEEDS_REMEDY, Record

PLAN: dict[str, Any] = json.loads(MANIFEST.read_text())["plan"]


def recordings() -> list[Path]:
    return sorted(RECORDINGS.glob("*.json")) + sorted((FIXTURES / "hgx").glob("*.json"))


def _degraded_hgx(rec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Fabric faults on an HGX recording: Fabric Manager down, an IB port down."""
    down = json.loads(json.dumps(rec))
    if down.get("fabric_manager"):
        down["fabric_manager"]["active_state"] = "failed"
    for ports in (down.get("infiniband") or {}).values():
        for port in ports.values():
            port["state"] = "1: DOWN"
            break
        break
    yield down


def verify_tier(rec: dict[str, Any]) -> Iterator[Record]:
    """The checks suite's verdicts for this recording (torch from the recording)."""
    try:
        reading = RecordedReader(rec).read()
    except NvmlUnavailable as exc:
        yield health.no_driver(health.DRIVER_LOADED, exc, require_gpu=True)
        return
    tf = TorchFacts.from_dict(rec.get("torch") or {})
    raw = rec.get("cuda_visible_devices")
    visible = visible_devices({} if raw is None else {"CUDA_VISIBLE_DEVICES": raw})
    yield health.driver_loaded(reading)
    yield health.driver_version(reading, PLAN.get("min_driver"))
    yield health.cuda_driver_version(reading, tf.cuda or PLAN.get("cuda"))
    yield health.nouveau(rec.get("proc_modules", ()))
    yield health.gpu_count(reading, None, rec.get("pci_nvidia_gpus"))
    yield health.torch_cuda_available(tf, None)
    yield health.torch_device_count(tf, len(reading.gpus), visible)
    yield health.torch_cuda_version(tf, PLAN.get("cuda"), None)
    yield health.nccl_version(tf, PLAN.get("nccl"))
    yield health.cuda_visible_devices(tf, visible, len(reading.gpus))
    nvcc = rec.get("nvcc") or {}
    yield health.toolkit(nvcc.get("path"), nvcc.get("release"), health.toolkit_from_plan(PLAN))
    for gpu in reading.gpus:
        lost = health.gpu_unreadable("gpu_readable", gpu)
        if lost is not None:
            yield lost
            continue
        for check in (health.persistence_mode, health.ecc_mode, health.ecc_uncorrectable,
                      health.page_retirement, health.row_remap, health.pcie_link,
                      health.nvlink, health.clock_event_reasons):  # fmt: skip
            yield check(gpu)
        yield health.torch_arch(gpu, tf)
    if "kernel_log" in rec:
        at = datetime.fromisoformat(rec["recorded_at"].replace("Z", "+00:00"))
        yield fast_checks.xid_record(rec["kernel_log"], "recording", at, 2.0, reading)
    yield health.kernel_log_unreadable("journalctl: not found; dmesg: not permitted")
    facts = fabric.PlatformFacts.from_recording(rec)
    ports = ibports.ports_from_raw(facts.infiniband)
    yield fabric.fabric_manager(facts, reading)
    yield fabric.gpu_fabric_state(facts, reading)
    yield ibports.ib_ports(ports)
    yield ibports.gpudirect_rdma(ports, len(reading.gpus), rec.get("proc_modules", []))


def _no_remedy(records: list[Record]) -> list[tuple[str, str, str | None]]:
    return [(r.name, r.status, r.gpu) for r in records if r.status in NEEDS_REMEDY and not r.remedy]


@pytest.mark.parametrize("path", recordings(), ids=lambda p: p.stem)
def test_every_non_pass_verdict_has_a_remedy(path: Path, tmp_path: Path) -> None:
    rec = load_recording(path)
    states = [rec, *(_degraded_hgx(rec) if path.parent.name == "hgx" else ())]
    seen: list[Record] = []
    for state in states:
        seen += list(verify_tier(state))
        seen += fast_checks.run_checks(
            manifest_path=tmp_path / "absent.json", recording=state, require_gpu=True,
            expected_gpus=4,  # a count no recording has: gpu_count fails everywhere
        )  # fmt: skip
    assert not _no_remedy(seen), _no_remedy(seen)
    assert any(r.status in NEEDS_REMEDY for r in seen)  # the walk reached a non-pass verdict


def test_the_walk_covers_the_degraded_states() -> None:
    """Fault recordings exist for the families above (a renamed generator would empty it)."""
    names = {p.stem for p in recordings()}
    assert {"gpu-lost", "xid-recent", "nvlink-down", "clock-events", "nvcc-mismatch",
            "no-driver", "hgx-h100"} <= names  # fmt: skip


def test_no_remedy_is_found() -> None:
    """The helper itself flags a failing record without a remedy."""
    assert _no_remedy([Record("x", "fail"), Record("y", "pass")]) == [("x", "fail", None)]
