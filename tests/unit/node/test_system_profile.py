"""The node check ``profile`` (gpufleet.node.health.system_profile, judged through the registry
on a NodeContext): the node against its system profile, every finding of the diff in one
record, the profile and its findings in the result file's meta."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from checks_helpers import RECORDINGS
from fixtures.profiles import degraded as DEGRADED
from gpufleet.commands.cmd_health import add_suite_options
from gpufleet.node.health import check_registry as registry
from gpufleet.node.health import names
from gpufleet.node.health.context import NodeContext
from gpufleet.node.nvml import RecordedReader, load_recording
from gpufleet.results import Record

DEGRADED_RECORDINGS: dict[str, dict[str, Any]] = DEGRADED.recordings()
CHECK = next(c for c in registry.CHECKS if c.name == names.SYSTEM_PROFILE)
H100 = "hgx-h100-8gpu"


def judge(rec: dict[str, Any], **options: Any) -> tuple[Record, NodeContext]:
    """The suite's record of the profile check on ``rec``, and the context it read."""
    ctx = NodeContext.open(options, None, RecordedReader(rec), rec)
    (record,) = registry.suite_records(CHECK, ctx)
    return record, ctx


def generated(name: str) -> dict[str, Any]:
    return load_recording(RECORDINGS / f"{name}.json")


def test_the_check_is_in_the_verify_suite_only() -> None:
    """The suite judges the profile; gpufleet health (a drain on every failure) does not."""
    assert CHECK.tiers == frozenset({"verify"})
    assert CHECK in registry.suite_family("profile")


def test_the_healthy_h100_with_its_ports_matches_its_profile() -> None:
    record, ctx = judge(DEGRADED_RECORDINGS["healthy-h100x8-ib"])
    assert record.status == "pass", record
    assert record.message.startswith(f"matches profile {H100} (")
    assert "detected" in record.message
    meta = ctx.meta["profile"]
    assert (meta["name"], meta["how"], meta["findings"]) == (H100, "detected", [])
    assert meta["ib_compared"] is True


@pytest.mark.parametrize("name", sorted(n for n, r in DEGRADED_RECORDINGS.items() if "expect" in r))
def test_each_degraded_recording_gives_its_finding_through_the_check(name: str) -> None:
    finding, status, gpu = DEGRADED_RECORDINGS[name]["expect"]
    record, ctx = judge(DEGRADED_RECORDINGS[name])
    assert record.status == status
    assert record.message.startswith(f"1 field(s) differ from profile {H100}")
    assert f"[{finding}] " in record.message
    assert "expected " in record.message and ", found " in record.message
    assert record.remedy.startswith(f"{finding}: ")
    (found,) = ctx.meta["profile"]["findings"]
    assert (found["name"], found["status"], found["gpu"]) == (finding, status, gpu)
    assert found["expected"] is not None and found["found"] is not None
    assert "Fix:" not in found["text"]


def test_nvlink_down_says_expected_18_found_17_on_gpu_1() -> None:
    record, ctx = judge(DEGRADED_RECORDINGS["nvlink-down"])
    assert "GPU 1 (00000000:2A:00.0): active NVLinks: expected 18, found 17" in record.message
    (found,) = ctx.meta["profile"]["findings"]
    assert (found["expected"], found["found"]) == (18, 17)


def test_several_findings_take_the_worst_status_and_list_each_once() -> None:
    rec = copy.deepcopy(DEGRADED_RECORDINGS["nvlink-down"])
    rec["nvml"]["gpus"][6]["pcie_width_current"] = 8
    rec["infiniband"]["mlx5_3"]["1"]["rate"] = DEGRADED.HDR
    record, ctx = judge(rec)
    assert record.status == "fail"
    assert record.value == "3 field(s) differ"
    got = [f["name"] for f in ctx.meta["profile"]["findings"]]
    assert got == ["profile_nvlink", "profile_pcie_width", "profile_ib_port_rate"]
    for name in got:
        assert record.message.count(f"[{name}]") == 1
        assert record.remedy.count(f"{name}: ") == 1


@pytest.mark.parametrize("requested", ["hgx-h100-8gpux", "HGX-H100-8GPU", "dgx"])
def test_an_unknown_name_fails_with_the_known_ones_and_what_to_set(requested: str) -> None:
    record, ctx = judge(DEGRADED_RECORDINGS["healthy-h100x8-ib"], system_profile=requested)
    assert record.status == "fail"
    assert f"unknown system profile {requested!r}" in record.message
    assert H100 in record.message and "simulated-cpu" in record.message
    assert "gpufleet_system_profile" in record.remedy
    assert record.value == requested
    assert ctx.meta["profile"]["name"] is None
    assert ctx.meta["profile"]["error"] == record.message


def test_a_gpu_model_no_profile_lists_fails_under_auto_naming_the_model() -> None:
    record, _ = judge(generated("healthy-rtx4090x1"))
    assert record.status == "fail"
    assert "no profile lists the GPU model(s) of this node: NVIDIA GeForce RTX 4090" in (
        record.message
    )
    assert "gpufleet_system_profile" in record.remedy


def test_a_named_profile_wins_over_detection() -> None:
    record, ctx = judge(DEGRADED_RECORDINGS["healthy-h100x8-ib"], system_profile="hgx-h200-8gpu")
    assert record.status == "fail"
    assert "from profile hgx-h200-8gpu (" in record.message and "named" in record.message
    # an H100 80GB where an H200 (141 GB) is named: every GPU's model and memory differ
    assert {f["name"] for f in ctx.meta["profile"]["findings"]} == {
        "profile_gpu_model",
        "profile_gpu_memory",
    }


def test_a_node_without_driver_or_pci_gpus_is_the_simulated_cpu_node() -> None:
    """The testbed's CPU nodes: no NVML, no NVIDIA GPU on the PCI bus."""
    rec = generated("no-driver")
    assert rec.get("pci_nvidia_gpus") is None
    record, ctx = judge(rec, require_gpu=True)
    assert record.status == "pass", record
    assert "matches profile simulated-cpu" in record.message
    assert ctx.meta["profile"]["name"] == "simulated-cpu"


def test_a_cpu_node_named_as_an_hgx_node_misses_its_gpus() -> None:
    record, _ = judge(generated("no-driver"), system_profile=H100)
    assert record.status == "fail"
    assert "[profile_gpu_count] GPU count" in record.message
    assert "expected 8, found 0" in record.message


@pytest.mark.parametrize(("require", "status"), [(False, "skip"), (True, "fail")])
def test_gpus_on_the_pci_bus_without_a_driver_get_the_no_driver_verdict(
    require: bool, status: str
) -> None:
    rec = {**generated("no-driver"), "pci_nvidia_gpus": 8}
    record, ctx = judge(rec, require_gpu=require)
    assert record.status == status
    assert record.message.startswith("no NVIDIA driver")
    assert "profile" not in ctx.meta


def test_a_broken_driver_is_not_judged_as_a_cpu_node() -> None:
    record, _ = judge(generated("rm-version-mismatch"))
    assert record.status == "fail"
    assert "NVML unavailable" in record.message


def test_ports_are_compared_only_when_read() -> None:
    absent, ctx = judge(DEGRADED.without_ib(DEGRADED_RECORDINGS["ib-half-rate"]))
    assert absent.status == "pass"
    assert "HCA ports not compared" in absent.message
    assert ctx.meta["profile"]["ib_compared"] is False
    empty = {**DEGRADED_RECORDINGS["healthy-h100x8-ib"], "infiniband": {}}
    none_found, _ = judge(empty)
    assert none_found.status == "fail"
    assert "[profile_ib_port_count] InfiniBand ports: expected 8, found 0" in none_found.message


@pytest.mark.parametrize(
    ("recording", "status"),
    [("pcie-gen-idle-recovers", "pass"), ("pcie-gen-stuck", "fail")],
)
def test_an_idle_link_below_the_profile_is_judged_under_load(recording: str, status: str) -> None:
    """GPU 7 idles at Gen1: re-read under load it reaches Gen5 (pass) or stays at Gen3."""
    record, _ = judge(generated(recording))
    assert record.status == status, record
    if status == "fail":
        assert "[profile_pcie_generation]" in record.message
        assert "expected Gen5, found Gen3" in record.message


def test_an_idle_link_that_cannot_be_loaded_warns() -> None:
    record, _ = judge(generated("pcie-gen-idle-downshift"))
    assert record.status == "warn"
    assert "[profile_pcie_generation]" in record.message


def test_the_option_is_declared_for_the_suite() -> None:
    parser = argparse.ArgumentParser()
    add_suite_options(parser.add_argument)
    assert parser.parse_args(["--system-profile", H100]).system_profile == H100
    assert parser.parse_args([]).system_profile is None
