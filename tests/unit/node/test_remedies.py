"""Every warn, fail and incomplete verdict says what to do: each node check runs over every
recorded node state (the healthy and degraded NVML recordings, the HGX recordings with their
fabric faults) and each record that is not a pass or a skip must carry a non-empty remedy.

The checks are walked through the registry (gpufleet.node.health.check_registry) as gpufleet health
(fast_checks) and the checks suite (checks/) walk it, with the facts taken from the recording."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import FIXTURES, MANIFEST, RECORDINGS
from gpufleet.node import fast_checks
from gpufleet.node.health import check_registry as registry
from gpufleet.node.health.context import NodeContext
from gpufleet.node.nvml import RecordedReader, load_recording
from gpufleet.results import NEEDS_REMEDY, Record


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


def verify_tier(rec: dict[str, Any], tmp_path: Path) -> Iterator[Record]:
    """The checks suite's records for this recording: every verify check of the registry,
    torch from the recording, and a kernel log that cannot be read when it has none."""
    state = {**rec, "torch": rec.get("torch") or {}}
    options = {"require_gpu": True, "kernel_log": str(tmp_path / "no-kernel.log")}
    ctx = NodeContext.open(options, MANIFEST, RecordedReader(state), state)
    for check in registry.tier("verify"):
        yield from registry.suite_records(check, ctx)


def _no_remedy(records: list[Record]) -> list[tuple[str, str, str | None]]:
    return [(r.name, r.status, r.gpu) for r in records if r.status in NEEDS_REMEDY and not r.remedy]


@pytest.mark.parametrize("path", recordings(), ids=lambda p: p.stem)
def test_every_non_pass_verdict_has_a_remedy(path: Path, tmp_path: Path) -> None:
    rec = load_recording(path)
    states = [rec, *(_degraded_hgx(rec) if path.parent.name == "hgx" else ())]
    seen: list[Record] = []
    for state in states:
        seen += list(verify_tier(state, tmp_path))
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
