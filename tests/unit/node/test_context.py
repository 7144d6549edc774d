"""gpufleet.node.health.context: what both front ends read, resolved the same way (options over
the manifest, the manifest over the environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks_helpers import MANIFEST
from gpufleet.node.health.context import NodeContext, expected_gpus_from, require_gpu_from
from gpufleet.node.nvml import RecordedReader

NO_DRIVER = {"nvml": {"error": 12}}


def test_require_gpu_says_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_REQUIRE_GPU", "yes")
    assert require_gpu_from({"require_gpu": "False"}, True) == (True, "option")
    assert require_gpu_from({"require_gpu": "False"}, None) == (False, "manifest")
    assert require_gpu_from({"require_gpu": None}, None) == (True, "env")
    monkeypatch.delenv("GPUFLEET_REQUIRE_GPU")
    assert require_gpu_from({}, None) == (False, "default")


@pytest.mark.parametrize(
    ("raw", "expected"), [(8, 8), ("7", 7), ("all", None), (0, None), (True, None), (None, None)]
)
def test_expected_gpus_from_the_manifest(raw: object, expected: int | None) -> None:
    assert expected_gpus_from({"gpus_expected": raw}, None) == expected
    assert expected_gpus_from({"gpus_expected": raw}, 2) == 2


def test_options_override_the_plan(tmp_path: Path) -> None:
    plan = json.loads(MANIFEST.read_text())["plan"]
    ctx = NodeContext.open({}, MANIFEST, RecordedReader(NO_DRIVER))
    assert (ctx.plan_cuda, ctx.plan_nccl) == (plan["cuda"], plan["nccl"])
    ctx = NodeContext.open(
        {"expect_cuda": "12.4", "expect_nccl": "2.21.5"}, MANIFEST, RecordedReader(NO_DRIVER)
    )
    assert (ctx.plan_cuda, ctx.plan_nccl) == ("12.4", "2.21.5")
    assert ctx.nvml_error is not None and ctx.reading is None


def test_a_broken_manifest_is_found_and_named(tmp_path: Path) -> None:
    broken = tmp_path / "manifest.json"
    broken.write_text("[1, 2]")
    ctx = NodeContext.open({}, broken, RecordedReader(NO_DRIVER))
    assert ctx.manifest_found and "holds list" in ctx.manifest_error
    assert ctx.provisioned().manifest is None
    absent = NodeContext.open({}, tmp_path / "absent.json", RecordedReader(NO_DRIVER))
    assert not absent.manifest_found and absent.manifest_error == ""
