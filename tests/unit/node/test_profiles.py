"""gpufleet.node.profiles: the shipped profile files, their validation, detection from NVML
readings, and the diff of degraded H100 recordings (tests/fixtures/profiles/degraded.py)
against the H100 profile: each fault gives exactly its one named finding."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fixtures.profiles import degraded as DEGRADED
from gpufleet.errors import EXIT_FAILED, EXIT_REFUSED
from gpufleet.node import profiles as prof
from gpufleet.node.ib_ports import IbPort, ports_from_raw
from gpufleet.node.nvml import GpuReading, NodeReading, RecordedReader
from gpufleet.results import Record

REPO = Path(__file__).resolve().parents[3]
PROFILE_DIR = REPO / "src" / "gpufleet" / "data" / "profiles"
NVML = REPO / "tests" / "fixtures" / "nvml"
H100, H200, A100, L40S, CPU = (
    "hgx-h100-8gpu", "hgx-h200-8gpu", "hgx-a100-80gb-8gpu", "pcie-l40s-8gpu", "simulated-cpu",
)  # fmt: skip


RECORDINGS: dict[str, dict[str, Any]] = DEGRADED.recordings()
PROFILES = prof.load_profiles()


def reading(rec: dict[str, Any]) -> NodeReading:
    return RecordedReader(rec).read()


def ports(rec: dict[str, Any]) -> list[IbPort]:
    return ports_from_raw(rec["infiniband"])


def committed(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((NVML / f"{name}.json").read_text(encoding="utf-8"))
    return data


def h100_gpu(**changes: Any) -> GpuReading:
    base = reading(RECORDINGS["healthy-h100x8-ib"]).gpus[0]
    return GpuReading.from_dict({**base.to_dict(), **changes})


def one_changed(index: int, **changes: Any) -> NodeReading:
    """The healthy H100 node with GPU ``index`` changed."""
    node = reading(RECORDINGS["healthy-h100x8-ib"])
    gpus = list(node.gpus)
    gpus[index] = GpuReading.from_dict({**gpus[index].to_dict(), **changes})
    return node_of(*gpus)


def node_of(*gpus: GpuReading, driver: str = "570.133.20") -> NodeReading:
    return NodeReading(driver_version=driver, cuda_driver_version=12080, gpus=gpus)


def names(records: list[Record]) -> list[str]:
    return [r.name for r in records]


# ------------------------------------------------------------------ the shipped files


def _figures(data: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every {"value": ...} object of a profile file, by its dotted path."""
    if isinstance(data, dict) and "value" in data:
        return [(path, data)]
    if isinstance(data, dict):
        return [f for k, v in data.items() for f in _figures(v, f"{path}.{k}".strip("."))]
    return []


def test_the_five_system_types_ship() -> None:
    assert {H100, H200, A100, L40S, CPU} <= set(PROFILES)
    files = sorted(p.stem for p in PROFILE_DIR.glob("*.json"))
    assert files == sorted(PROFILES)


@pytest.mark.parametrize("path", sorted(PROFILE_DIR.glob("*.json")), ids=lambda p: p.stem)
def test_every_figure_has_a_source_or_says_why_not(path: Path) -> None:
    """A set figure names where it comes from (a public URL for real hardware); a null one
    says why there is none. Checked on the raw JSON, not through the loader."""
    data = json.loads(path.read_text(encoding="utf-8"))
    figures = _figures(data)
    assert len(figures) >= 15, figures
    for where, fig in figures:
        if fig["value"] is None:
            assert fig.get("note", "").strip(), f"{path.name}: {where} is null without a note"
            continue
        source = fig.get("source", "")
        assert source.strip(), f"{path.name}: {where} = {fig['value']!r} has no source"
        if data["name"] != CPU:
            assert source.startswith("https://"), f"{path.name}: {where}: {source!r}"
            assert "shared/" not in source and "../" not in source, source


@pytest.mark.parametrize("name", [H100, H200, A100])
def test_hgx_profiles_state_nvswitch_floors_and_eight_ndr_or_hdr_ports(name: str) -> None:
    p = PROFILES[name]
    assert p.gpu_count == 8 and p.nvswitch and p.fabric_manager
    assert p.ib_ports == 8 and p.ib_link_layer == "InfiniBand"
    floor = p.floor("allreduce_busbw_gbs")
    assert floor.value and floor.message_bytes and "azurehpc-health-checks" in floor.source


def test_floors_are_the_published_azure_figures() -> None:
    """The figures of the Azure confs (docs/profiles.md cites them), one by one."""
    got = {
        n: (PROFILES[n].floor("allreduce_busbw_gbs").value,
            PROFILES[n].floor("host_device_copy_gbs").value)
        for n in (H100, H200, A100)
    }  # fmt: skip
    assert got == {H100: (460.0, 52.0), H200: (431.0, 48.0), A100: (228.0, 24.0)}
    assert PROFILES[H100].floor("allreduce_busbw_gbs").message_bytes == 16 * 2**30


def test_l40s_has_no_invented_floor_and_pins_are_unset_by_default() -> None:
    l40s = PROFILES[L40S]
    for key in ("allreduce_busbw_gbs", "cross_node_busbw_per_nic_gbs", "host_device_copy_gbs"):
        assert l40s.floor(key).value is None and "no public floor" in l40s.floor(key).note
    assert l40s.nvlink_links == 0 and not l40s.nvswitch
    assert all(v is None for p in PROFILES.values() for v in p.pins.values())


# ------------------------------------------------------------------ validation


def _write(tmp_path: Path, data: Any, name: str = "mine") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def _h100_raw() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PROFILE_DIR / f"{H100}.json").read_text("utf-8"))
    data["name"] = "mine"
    return data


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for key in head:
        data = data[key]
    if value is _DELETE:
        del data[last]
    else:
        data[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("dotted", "value", "field", "says"),
    [
        ("gpu.count.value", "eight", "gpu.count.value", "a whole number"),
        ("gpu.count.value", True, "gpu.count.value", "a whole number"),
        ("gpu.memory_gb.source", "", "gpu.memory_gb.source", "public source"),
        ("floors.allreduce_busbw_gbs.value", -460, "floors.allreduce_busbw_gbs.value", "> 0"),
        ("floors.allreduce_busbw_gbs.note", _DELETE, None, None),  # still valid: has a source
        ("network.rate_gbps", {"value": None}, "network.rate_gbps.note", "needs a note"),
        ("network.link_layer.value", "Infiniband", "network.link_layer.value", "InfiniBand"),
        ("gpu.nvml_names.value", [], "gpu.nvml_names", "exactly when"),
        ("gpu.nvlink_links", 18, "gpu.nvlink_links", "not a figure"),
        ("gpu.pcie_width", _DELETE, "gpu.pcie_width", "missing"),
        ("gpu.pcie_lanes", {"value": 16, "source": "x"}, "gpu.pcie_lanes", "unknown field"),
        (
            "floors.allreduce_busbw_gbs.sorce",
            "x",
            "floors.allreduce_busbw_gbs.sorce",
            "unknown key",
        ),
        ("pins.driver_branch", 570, "pins.driver_branch", "version string"),
        ("name", "other", "name", "file name"),
        ("schema", 2, "schema", "expected 1"),
    ],
)
def test_a_malformed_profile_names_the_file_and_the_field(
    tmp_path: Path, dotted: str, value: Any, field: str | None, says: str | None
) -> None:
    data = _h100_raw()
    _set(data, dotted, value)
    path = _write(tmp_path, data)
    if field is None or says is None:
        assert prof.load_profile(path).name == "mine"
        return
    with pytest.raises(prof.ProfileFileError) as err:
        prof.load_profile(path)
    text = str(err.value)
    assert str(path) in text and f"field {field}:" in text and says in text, text
    assert err.value.exit_code == EXIT_FAILED


def test_a_file_that_is_not_json_is_refused_with_its_line(tmp_path: Path) -> None:
    _write(tmp_path, '{"schema": 1,\n "name": }')
    with pytest.raises(prof.ProfileFileError, match=r"field \(line 2\): not valid JSON"):
        prof.load_profiles(tmp_path)


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize(
    ("recording", "expected"),
    [
        ("healthy-h100x8-ib", H100),
        ("gpu-missing", H100),  # a missing GPU is a finding, never "unknown system"
        ("nvlink-down", H100),
    ],
)
def test_detect_from_the_nvml_product_names(recording: str, expected: str) -> None:
    assert prof.detect(reading(RECORDINGS[recording]), PROFILES).name == expected


def test_the_real_one_gpu_h200_is_detected_as_h200_and_fails_on_count_and_nvlink() -> None:
    """The 1-GPU H200 VM: the product name places it (only the HGX H200 profile lists it),
    and the diff says what an 8-GPU HGX board would have: 7 GPUs and the NVLinks."""
    rec = committed("real-h200x1")
    node = reading(rec)
    p = prof.detect(node, PROFILES, rec.get("pci_nvidia_gpus"))
    assert p.name == H200
    found = prof.diff(p, node)
    assert [(r.name, r.status, r.gpu) for r in found] == [
        ("profile_gpu_count", "fail", None),
        ("profile_nvlink", "fail", "0 (00000000:00:06.0)"),
    ]
    assert "expected 8, found 1 (7 missing" in found[0].message
    assert "gpufleet_system_profile" in found[0].remedy
    assert "no NVLink" in found[1].message


def test_a_node_without_gpus_is_the_simulated_cpu_node() -> None:
    assert prof.detect(node_of(), PROFILES, pci_gpus=0).name == CPU
    assert prof.detect(node_of(), PROFILES, pci_gpus=None).name == CPU


def test_no_gpu_in_nvml_but_gpus_on_the_pci_bus_is_refused_not_called_a_cpu_node() -> None:
    with pytest.raises(prof.ProfileError) as err:
        prof.detect(node_of(), PROFILES, pci_gpus=8)
    text = str(err.value)
    assert "PCI bus lists 8 NVIDIA GPU(s)" in text and "gpufleet_system_profile" in text
    assert err.value.exit_code == EXIT_REFUSED


def test_an_unknown_gpu_model_under_auto_lists_the_profiles_and_what_to_set() -> None:
    rtx = h100_gpu(name="NVIDIA GeForce RTX 4090")
    with pytest.raises(prof.ProfileError) as err:
        prof.detect(node_of(rtx), PROFILES)
    text = str(err.value)
    assert "NVIDIA GeForce RTX 4090" in text and "gpufleet_system_profile" in text
    assert all(name in text for name in (H100, H200, A100, L40S, CPU))


def test_one_odd_gpu_keeps_the_majority_profile_and_is_a_model_finding() -> None:
    rec = copy.deepcopy(RECORDINGS["healthy-h100x8-ib"])
    rec["nvml"]["gpus"][3]["name"] = "NVIDIA H200"
    node = reading(rec)
    p = prof.detect(node, PROFILES)
    assert p.name == H100
    found = prof.diff(p, node, ports(rec))
    assert [(r.name, r.gpu) for r in found] == [("profile_gpu_model", "3 (00000000:5D:00.0)")]
    assert "expected NVIDIA H100 80GB HBM3, found NVIDIA H200" in found[0].message


def test_two_profiles_of_one_model_are_told_apart_by_the_gpu_count(tmp_path: Path) -> None:
    four = _h100_raw()
    four["name"] = "h100-4gpu"
    four["gpu"]["count"]["value"] = 4
    _write(tmp_path, four, "h100-4gpu")
    (tmp_path / f"{H100}.json").write_text((PROFILE_DIR / f"{H100}.json").read_text("utf-8"))
    both = prof.load_profiles(tmp_path)
    gpus = reading(RECORDINGS["healthy-h100x8-ib"]).gpus
    assert prof.detect(node_of(*gpus), both).name == H100
    assert prof.detect(node_of(*gpus[:4]), both).name == "h100-4gpu"
    with pytest.raises(prof.ProfileError, match="2 profiles fit this node's 6 GPU"):
        prof.detect(node_of(*gpus[:6]), both)


def test_a_named_profile_overrides_detection() -> None:
    node = reading(RECORDINGS["healthy-h100x8-ib"])
    assert prof.select("auto", node, PROFILES).name == H100
    named = prof.select(H200, node, PROFILES)
    assert named.name == H200
    found = prof.diff(named, node)
    assert names(found) == ["profile_gpu_model", "profile_gpu_memory"] * 8
    assert {r.status for r in found[::2]} == {"fail"} and {r.status for r in found[1::2]} == {
        "warn"
    }


def test_an_unknown_profile_name_lists_the_known_ones() -> None:
    with pytest.raises(prof.ProfileError) as err:
        prof.select("hgx-h100", reading(RECORDINGS["healthy-h100x8-ib"]), PROFILES)
    text = str(err.value)
    assert "unknown system profile 'hgx-h100'" in text and H100 in text and "auto" in text


# ------------------------------------------------------------------ the diff


def test_the_healthy_h100_has_no_difference_from_its_profile() -> None:
    rec = RECORDINGS["healthy-h100x8-ib"]
    assert prof.diff(PROFILES[H100], reading(rec), ports(rec)) == []
    assert prof.diff(PROFILES[H100], reading(committed("healthy-h100x8"))) == []


@pytest.mark.parametrize("name", [n for n in RECORDINGS if "expect" in RECORDINGS[n]], ids=str)
def test_each_degraded_recording_gives_exactly_its_finding(name: str) -> None:
    rec = RECORDINGS[name]
    found = prof.diff(PROFILES[H100], reading(rec), ports(rec), node="gpu-h100-01")
    assert [(r.name, r.status, r.gpu) for r in found] == [tuple(rec["expect"])], found
    assert found[0].node == "gpu-h100-01" and found[0].remedy
    assert found[0].message.endswith(f"Fix: {found[0].remedy}")


def test_pcie_x8_says_expected_and_found_and_to_reseat() -> None:
    rec = RECORDINGS["pcie-width-x8"]
    (r,) = prof.diff(PROFILES[H100], reading(rec), ports(rec))
    assert r.message.startswith("GPU 6 (00000000:BA:00.0): PCIe link width: expected x16, found x8")
    assert "reseat or replace the GPU / riser" in r.remedy and "slot" in r.remedy


def test_nvlink_down_names_the_link_and_the_fabric_remedy() -> None:
    rec = RECORDINGS["nvlink-down"]
    (r,) = prof.diff(PROFILES[H100], reading(rec), ports(rec))
    assert "expected 18, found 17 (18 present, inactive: [7])" in r.message
    assert "nvidia-fabricmanager" in r.remedy and "nvidia-smi -r" in r.remedy and "RMA" in r.remedy


def test_ib_port_at_half_rate_names_the_port_and_the_cable() -> None:
    rec = RECORDINGS["ib-half-rate"]
    (r,) = prof.diff(PROFILES[H100], reading(rec), ports(rec))
    assert (
        "port mlx5_3:1 rate: expected 400 Gb/sec, found 200 Gb/sec (4X HDR) (half rate)"
        in r.message
    )
    assert "cable / transceiver" in r.remedy and "switch port" in r.remedy


def test_missing_gpu_says_nvidia_smi_xid_79_and_reseat() -> None:
    rec = RECORDINGS["gpu-missing"]
    (r,) = prof.diff(PROFILES[H100], reading(rec), ports(rec))
    assert "expected 8, found 7 (1 missing" in r.message and "00000000:DB:00.0" not in r.message
    assert "nvidia-smi -L" in r.remedy and "Xid 79" in r.remedy and "reseat" in r.remedy


def test_ports_not_read_are_not_compared_but_an_empty_read_is() -> None:
    node = reading(RECORDINGS["healthy-h100x8-ib"])
    assert prof.diff(PROFILES[H100], node, None) == []
    (r,) = prof.diff(PROFILES[H100], node, [])
    assert (r.name, r.value, r.threshold) == ("profile_ib_port_count", 0, 8)


def test_a_down_port_and_a_roce_port_in_place_of_an_ib_one() -> None:
    raw = DEGRADED.healthy_ib()
    raw["mlx5_2"]["1"] = DEGRADED.port(state="1: DOWN", phys="2: Polling")
    raw["mlx5_5"]["1"] = DEGRADED.port(layer="Ethernet")
    found = prof.diff(PROFILES[H100], reading(RECORDINGS["healthy-h100x8-ib"]), ports_from_raw(raw))
    assert [(r.name, r.status) for r in found] == [
        ("profile_ib_port_count", "fail"),
        ("profile_ib_port_state", "fail"),
    ]
    assert "expected 8, found 7" in found[0].message
    assert "mlx5_2:1 state: expected ACTIVE/LinkUp, found DOWN/Polling" in found[1].message


@pytest.mark.parametrize(
    ("changes", "status", "found"),
    [
        ({"pcie_gen_current": 1}, "warn", "found Gen1"),  # idle (clock reason 0x1): downshift
        (
            {"pcie_gen_current": 4, "clock_event_reasons": 0, "utilization_gpu": 97},
            "fail",
            "found Gen4",
        ),
        ({"pcie_gen_max": 4, "pcie_gen_current": 4}, "fail", "found Gen4 (current Gen4)"),
    ],
)
def test_pcie_generation_below_the_profile(
    changes: dict[str, Any], status: str, found: str
) -> None:
    (r,) = prof.diff(PROFILES[H100], one_changed(4, **changes), None)
    assert (r.name, r.status) == ("profile_pcie_generation", status)
    assert f"expected Gen5, {found}" in r.message


@pytest.mark.parametrize(
    ("changes", "name", "status"),
    [
        ({"memory_total": 68_000_000_000}, "profile_gpu_memory", "warn"),
        ({"fabric_state": 2, "fabric_status": 0}, "profile_nvswitch_fabric", "fail"),
        ({"fabric_state": 3, "fabric_status": 0}, None, None),
        ({"error": "GPU is lost (fell off the bus) (NVML error 15)", "error_code": 15},
         "profile_gpu_unreadable", "fail"),
    ],
)  # fmt: skip
def test_one_gpu_field_off_the_profile(
    changes: dict[str, Any], name: str | None, status: str | None
) -> None:
    found = prof.diff(PROFILES[H100], one_changed(5, **changes), None)
    expected = [(name, status, "5 (00000000:AB:00.0)")] if name else []
    assert [(r.name, r.status, r.gpu) for r in found] == expected


def test_more_gpus_than_the_profile_warn_and_a_gpu_on_the_cpu_profile_too() -> None:
    nine = node_of(*([h100_gpu()] * 9))
    assert [(r.name, r.status) for r in prof.diff(PROFILES[H100], nine)] == [
        ("profile_gpu_count", "warn")
    ]
    assert prof.diff(PROFILES[CPU], node_of(), []) == []
    (r,) = prof.diff(PROFILES[CPU], node_of(h100_gpu()))
    assert (r.name, r.status, r.threshold, r.value) == ("profile_gpu_count", "warn", 0, 1)


def test_a_driver_pin_is_compared_when_set(tmp_path: Path) -> None:
    data = _h100_raw()
    data["pins"]["driver_branch"] = "580"
    pinned = prof.load_profile(_write(tmp_path, data))
    node = reading(RECORDINGS["healthy-h100x8-ib"])
    (r,) = prof.diff(pinned, node)
    assert (r.name, r.status) == ("profile_driver_branch", "fail")
    assert "expected 580, found 570 (570.133.20)" in r.message
    data["pins"]["driver_branch"] = "570"
    assert prof.diff(prof.load_profile(_write(tmp_path, data)), node) == []


def test_l40s_profile_ignores_nvlink_and_ib_it_does_not_state() -> None:
    l40s = h100_gpu(name="NVIDIA L40S", pcie_gen_current=4, pcie_gen_max=4, nvlink={},
                    memory_total=48_305_209_344)  # fmt: skip
    node = node_of(*[l40s] * 8)
    assert prof.detect(node, PROFILES).name == L40S
    assert prof.diff(PROFILES[L40S], node, []) == []
