"""gpufleet.node.health.check_registry: the one list of node checks both front ends are built from
(gpufleet health runs the health tier, checks/ generates one test per verify check)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.node.health import check_registry as registry
from gpufleet.node.health import names
from gpufleet.node.health.context import NodeContext
from gpufleet.node.nvml import RecordedReader, load_recording

REPO = Path(__file__).resolve().parents[3]


def context(recording: str, tmp_path: Path, **options: Any) -> NodeContext:
    rec = load_recording(RECORDINGS / f"{recording}.json")
    opts = {"kernel_log": str(tmp_path / "absent.log"), **options}
    return NodeContext.open(opts, MANIFEST, RecordedReader(rec), rec)


def test_check_names_are_unique_and_every_check_has_a_tier() -> None:
    seen = [c.name for c in registry.CHECKS]
    assert len(seen) == len(set(seen)), sorted(n for n in seen if seen.count(n) > 1)
    assert all(c.tiers for c in registry.CHECKS)


def _suite_families() -> dict[str, str]:
    """checks/test_<file>.py -> the family it generates its tests from (suite_tests("..."))."""
    out: dict[str, str] = {}
    for path in sorted((REPO / "checks").glob("test_*.py")):
        calls = [
            n for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "suite_tests"
        ]  # fmt: skip
        assert len(calls) == 1, f"{path}: no suite_tests(<family>) call"
        arg = calls[0].args[0]
        assert isinstance(arg, ast.Constant)
        out[path.stem.removeprefix("test_")] = str(arg.value)
    return out


def test_every_verify_family_has_its_checks_file() -> None:
    """A verify check whose family has no checks/test_<family>.py would never run."""
    files = _suite_families()
    assert all(stem == family for stem, family in files.items()), files
    families = {c.family for c in registry.tier("verify")}
    assert families == set(files), f"families without a file: {families - set(files)}"


@pytest.mark.parametrize("recording", ["healthy-h100x8", "gpu-lost", "no-driver"])
def test_each_verify_judge_names_its_records_as_registered(tmp_path: Path, recording: str) -> None:
    ctx = context(recording, tmp_path, require_gpu=True)
    for check in registry.tier("verify"):
        records = list(registry.suite_records(check, ctx))
        assert {r.name for r in records} == {check.name}, check
        if check.scope == "gpu" and ctx.reading is not None:
            assert [r.gpu for r in records] == [g.label for g in ctx.reading.gpus]


def test_health_runs_per_gpu_checks_gpu_by_gpu_in_one_block(tmp_path: Path) -> None:
    """The order gpufleet health's records have always had (a drain reason names the first
    failure): node checks, then GPU 0's checks, GPU 1's, ..., then fabric state and Xid."""
    ctx = context("healthy-h100x8", tmp_path)
    got = [(r.name, r.gpu and r.gpu.split(" ")[0]) for r in registry.health_records(ctx)]
    per_gpu = [names.PERSISTENCE, names.ECC_UNCORRECTABLE, names.PAGE_RETIREMENT,
               names.ROW_REMAP, names.NVLINK]  # fmt: skip
    assert got == [
        (names.MANIFEST, None), (names.ENV_PYTHON, None), (names.NCCL_ENV, None),
        (names.DRIVER_LOADED, None), (names.DRIVER_VERSION, None), (names.GPU_COUNT, None),
        *[(name, str(i)) for i in range(8) for name in per_gpu],
        (names.XID, None),
    ]  # fmt: skip


def test_health_never_reads_torch(tmp_path: Path) -> None:
    """The fast path stays torch-free: no health-tier judge asks for the torch facts."""
    ctx = context("healthy-h100x8", tmp_path)
    ctx.recording = {k: v for k, v in (ctx.recording or {}).items() if k != "torch"}
    registry.health_records(ctx)
    assert "torch" not in ctx.meta


def test_health_without_a_driver_reports_it_once(tmp_path: Path) -> None:
    ctx = context("no-driver", tmp_path, require_gpu=True)
    records = registry.health_records(ctx)
    assert [r.name for r in records] == [
        names.MANIFEST,
        names.ENV_PYTHON,
        names.NCCL_ENV,
        names.DRIVER_LOADED,
        names.XID,
    ]
    assert records[3].status == "fail" and "require_gpu is true" in records[3].message


def test_health_reports_a_lost_gpu_in_place_of_its_checks(tmp_path: Path) -> None:
    records = registry.health_records(context("gpu-lost", tmp_path))
    lost = [r for r in records if r.gpu and r.gpu.startswith("3 ")]
    assert [(r.name, r.status) for r in lost] == [(names.GPU_READABLE, "fail")]


@pytest.mark.parametrize(
    ("require", "status", "says"),
    [(False, "skip", "no NVIDIA GPU visible to NVML"), (True, "fail", "NVML sees no GPU")],
)
def test_a_check_with_no_gpu_to_judge_follows_require_gpu(
    tmp_path: Path, require: bool, status: str, says: str
) -> None:
    ctx = context("healthy-h100x8", tmp_path, require_gpu=require)
    assert ctx.reading is not None
    ctx.reading = dataclasses.replace(ctx.reading, gpus=())
    check = next(c for c in registry.CHECKS if c.name == names.TORCH_CUDA)
    (record,) = registry.suite_records(check, ctx)
    assert record.status == status
    assert says in record.message
