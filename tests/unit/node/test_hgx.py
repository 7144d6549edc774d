"""HGX/NVSwitch and InfiniBand checks against recordings of healthy and broken nodes.

The recordings are tests/fixtures/hgx/<board>.json (healthy HGX H100, H200, B200); every
fault below is a small change set on one of them that must break exactly its check, with
its remedy. NCCL init logs are in tests/fixtures/nccl/.
"""

from __future__ import annotations

import copy
import ctypes
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import FIXTURES, run_suite
from gpufleet.node import dcgm
from gpufleet.node import ib_ports as ibports
from gpufleet.node import nccl_transport as nccltransport
from gpufleet.node import nvswitch as fabric
from gpufleet.node.nvml import PynvmlReader, RecordedReader
from gpufleet.planning import pci
from gpufleet.results import Record
from nvml_fakes import fake_pynvml

HGX = FIXTURES / "hgx"
NCCL = FIXTURES / "nccl"
BOARDS = ["hgx-h100", "hgx-h200", "hgx-b200"]
CHECKS = ("fabric_manager", "gpu_fabric_state", "ib_ports", "gpudirect_rdma")


def load(board: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HGX / f"{board}.json").read_text())
    return data


def verdicts(rec: dict[str, Any]) -> dict[str, Record]:
    facts = fabric.PlatformFacts.from_recording(rec)
    reading = RecordedReader(rec).read()
    ports = ibports.ports_from_raw(facts.infiniband)
    return {
        r.name: r
        for r in (
            fabric.fabric_manager(facts, reading),
            fabric.gpu_fabric_state(facts, reading),
            ibports.ib_ports(ports),
            ibports.gpudirect_rdma(
                ports, len(reading.gpus), rec.get("proc_modules", []), facts.memory_peers
            ),
        )
    }


# ---------------------------------------------------------------- faults (change sets)


def _fm(**kw: str) -> Callable[[dict[str, Any]], None]:
    return lambda rec: rec["fabric_manager"].update(kw)


def _gpu(index: int, **kw: object) -> Callable[[dict[str, Any]], None]:
    return lambda rec: rec["nvml"]["gpus"][index].update(kw)


def _port(hca: str, **kw: str) -> Callable[[dict[str, Any]], None]:
    return lambda rec: rec["infiniband"][hca]["1"].update(kw)


def _no_peermem(rec: dict[str, Any]) -> None:
    rec["proc_modules"].remove("nvidia_peermem")


def _peermem_unregistered(rec: dict[str, Any]) -> None:
    rec["memory_peers"] = []  # loaded, but built against another ib_core: nothing registered


FAULTS: dict[str, tuple[Callable[[dict[str, Any]], None], str, str, str]] = {
    # name: (change, check it breaks, remedy, words the message must carry)
    "fm-stopped": (_fm(active_state="inactive"), "fabric_manager", fabric.FM_REMEDY,
                   "is inactive"),
    "fm-not-installed": (_fm(active_state="inactive", load_state="not-found"),
                         "fabric_manager", fabric.FM_REMEDY, "not installed"),
    "fm-version-differs": (_fm(version="570.124.06"), "fabric_manager",
                           fabric.FM_VERSION_REMEDY, "570.124.06 != driver"),
    "fabric-in-progress": (_gpu(3, fabric_state=fabric.FABRIC_STATE_IN_PROGRESS),
                           "gpu_fabric_state", fabric.FABRIC_REMEDY, "state In Progress"),
    "fabric-status-error": (_gpu(5, fabric_status=999), "gpu_fabric_state",
                            fabric.FABRIC_REMEDY, "NVML error 999"),
    "fabric-two-clusters": (_gpu(7, fabric_cluster_uuid="11111111-2222-3333-4444-555555555555"),
                            "gpu_fabric_state", fabric.FABRIC_REMEDY, "2 cluster UUIDs"),
    "ib-port-down": (_port("mlx5_3", state="1: DOWN", phys_state="3: Disabled"), "ib_ports",
                     ibports.PORT_REMEDY, "mlx5_3:1 DOWN/Disabled"),
    "ib-port-polling": (_port("mlx5_5", state="1: DOWN", phys_state="2: Polling"), "ib_ports",
                        ibports.PORT_REMEDY, "mlx5_5:1 DOWN/Polling"),
    "ib-rate-downshift": (_port("mlx5_2", rate="200 Gb/sec (4X HDR)"), "ib_ports",
                          ibports.PORT_REMEDY, "mlx5_2:1 rate 200 Gb/sec (4X HDR) < 400"),
    "peermem-missing": (_no_peermem, "gpudirect_rdma", ibports.PEERMEM_REMEDY,
                        "nvidia-peermem is not loaded"),
    "peermem-unregistered": (_peermem_unregistered, "gpudirect_rdma",
                             ibports.PEERMEM_REGISTER_REMEDY,
                             "nvidia_peermem is loaded but not registered"),
}  # fmt: skip


@pytest.mark.parametrize("board", BOARDS)
def test_healthy_boards_pass_every_check(board: str) -> None:
    got = verdicts(load(board))
    assert {n: r.status for n, r in got.items()} == dict.fromkeys(CHECKS, "pass"), got
    assert got["gpu_fabric_state"].message.startswith("8 GPU(s) fabric state Completed")
    assert got["ib_ports"].threshold == "ACTIVE/LinkUp, >= 400 Gb/sec"


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_breaks_exactly_its_check(board: str, fault: str) -> None:
    change, check, remedy, words = FAULTS[fault]
    rec = copy.deepcopy(load(board))
    change(rec)
    got = verdicts(rec)
    failing = {n for n, r in got.items() if r.status == "fail"}
    assert failing == {check}, {n: r.message for n, r in got.items()}
    assert got[check].remedy == remedy
    assert words in got[check].message
    assert got[check].message.endswith(f"Fix: {remedy}")


def test_fabric_not_completed_names_the_gpu() -> None:
    rec = load("hgx-h100")
    rec["nvml"]["gpus"][3]["fabric_state"] = fabric.FABRIC_STATE_NOT_STARTED
    record = verdicts(rec)["gpu_fabric_state"]
    assert "GPU 3 (00000000:5D:00.0): state Not Started" in record.message
    assert isinstance(record.value, dict)
    assert record.value["3 (00000000:5D:00.0)"]["state"] == "Not Started"


def test_expected_roce_port_and_configured_rate() -> None:
    ports = ibports.ports_from_raw(load("hgx-b200")["infiniband"])
    roce = ibports.ib_ports(ports, ["mlx5_8:1"], min_rate_gbps=200, link_layer="Ethernet")
    assert roce.status == "fail" and "rate 100 Gb/sec (4X EDR) < 200" in roce.message
    assert ibports.ib_ports(ports, ["mlx5_8:1"], 100, "Ethernet").status == "pass"
    wrong_layer = ibports.ib_ports(ports, ["mlx5_0:1"], None, "Ethernet")
    assert "link layer InfiniBand, expected Ethernet" in wrong_layer.message
    missing = ibports.ib_ports(ports, ["mlx5_9:1"])
    assert missing.status == "fail" and "mlx5_9:1 missing" in missing.message


# ---------------------------------------------------------------- skips


def test_pcie_gpu_without_nvswitch_skips_the_fabric_checks() -> None:
    rec = load("hgx-h100")
    rec["pci_devices"] = [d for d in rec["pci_devices"] if "[0680]" not in d]
    for gpu in rec["nvml"]["gpus"]:
        gpu["fabric_state"] = fabric.FABRIC_STATE_NOT_SUPPORTED
    got = verdicts(rec)
    for name in ("fabric_manager", "gpu_fabric_state"):
        assert got[name].status == "skip"
        assert "no NVSwitch on the PCI bus" in got[name].message


def test_vm_without_nvswitch_says_so() -> None:
    facts = fabric.PlatformFacts(virtualization="hypervisor (Microsoft Corporation)")
    record = fabric.fabric_manager(facts, None)
    assert record.status == "skip" and "virtual machine" in record.message


def test_nvswitch_system_without_fabric_info_fails() -> None:
    rec = load("hgx-h200")
    for gpu in rec["nvml"]["gpus"]:
        for key in ("fabric_state", "fabric_status", "fabric_cluster_uuid", "fabric_clique_id"):
            del gpu[key]
    record = verdicts(rec)["gpu_fabric_state"]
    assert record.status == "fail" and "NVML reports no GPU fabric state" in record.message


def test_no_hca_skips_ib_and_gdr() -> None:
    rec = load("hgx-h100")
    rec["infiniband"] = {}
    got = verdicts(rec)
    assert got["ib_ports"].status == got["gpudirect_rdma"].status == "skip"
    assert "no InfiniBand/RoCE HCA" in got["ib_ports"].message
    ports = ibports.ports_from_raw(load("hgx-h100")["infiniband"])
    assert ibports.gpudirect_rdma(ports, 0, [], ()).status == "skip"


def test_gpudirect_rdma_pass_names_the_registered_client() -> None:
    record = verdicts(load("hgx-h100"))["gpudirect_rdma"]
    assert record.message.startswith("nvidia_peermem loaded and registered as nv_mem; 8 GPU(s)")
    assert record.value == {"modules": ["nvidia_peermem"], "registered": ["nv_mem"]}


def test_recording_without_memory_peers_is_incomplete_not_a_guess() -> None:
    rec = load("hgx-b200")
    del rec["memory_peers"]  # recorded before the section existed
    record = verdicts(rec)["gpudirect_rdma"]
    assert record.status == "incomplete"
    assert "nvidia_peermem loaded" in record.message and "unknown" in record.message
    assert record.remedy == ibports.PEERS_UNKNOWN_REMEDY
    del rec["infiniband"]  # not applicable wins over unknown
    assert verdicts(rec)["gpudirect_rdma"].status == "skip"


def test_fabric_manager_without_driver_fails_on_nvswitch_system() -> None:
    facts = fabric.PlatformFacts.from_recording(load("hgx-h100"))
    record = fabric.fabric_manager(facts, None)
    assert record.status == "fail" and "cannot be read" in record.message


# ---------------------------------------------------------------- readers


def test_nvswitch_detection_from_lspci_and_sysfs(tmp_path: Path) -> None:
    text = "\n".join(load("hgx-h100")["pci_devices"])
    text += "\n00:1f.0 ISA bridge [0601]: Intel Corporation Device [8086:1b81] (rev 11)\n"
    devices = pci.parse_lspci_nn(text)
    assert len(devices) == 13
    assert pci.nvswitches(devices) == [f"0000:0{i}:00.0" for i in (5, 6, 7, 8)]
    for dev in devices:  # the same bus as sysfs shows it
        d = tmp_path / dev.address
        d.mkdir()
        (d / "vendor").write_text(f"0x{dev.vendor}\n")
        (d / "device").write_text(f"0x{dev.device}\n")
        (d / "class").write_text(f"0x{dev.pci_class}00\n")
    from_sysfs = pci.read_pci_sysfs(tmp_path)
    assert from_sysfs is not None
    assert pci.nvswitches(from_sysfs) == pci.nvswitches(devices)
    assert pci.read_pci_sysfs(tmp_path / "absent") is None


def test_ib_sysfs_tree_reads_back(tmp_path: Path) -> None:
    raw = load("hgx-b200")["infiniband"]
    for hca, ports in raw.items():
        for port, files in ports.items():
            d = tmp_path / hca / "ports" / port
            d.mkdir(parents=True)
            for name, text in files.items():
                (d / name).write_text(text + "\n")
    assert ibports.read_ib_sysfs(tmp_path) == raw
    assert ibports.read_ib_sysfs(tmp_path / "absent") == {}
    ports = ibports.ports_from_raw(raw)
    assert ibports.active_ports(ports)[:2] == ["mlx5_0:1", "mlx5_1:1"]
    assert ports[0].rate_gbps == 400.0


def test_detect_virtualization() -> None:
    assert fabric.detect_virtualization("flags\t\t: fpu vme hypervisor lahf_lm\n", "QEMU\n") == (
        "hypervisor (QEMU)"
    )
    assert fabric.detect_virtualization("flags\t\t: fpu vme lahf_lm\n") is None
    assert fabric.parse_fm_version("Fabric Manager version is : 570.133.20\n") == "570.133.20"


def test_pynvml_reader_reads_fabric_info() -> None:
    import pynvml  # the real bindings' structures, filled by a fake call

    def fill(_h: int, ref: Any) -> int:
        info = ctypes.cast(ref, ctypes.POINTER(pynvml.c_nvmlGpuFabricInfo_v2_t)).contents
        info.state, info.status, info.cliqueId = 2, 0, 7
        info.clusterUuid[:] = list(range(16))
        return 0

    lib = fake_pynvml(
        nvmlDeviceGetGpuFabricInfoV=fill,
        c_nvmlGpuFabricInfoV_t=pynvml.c_nvmlGpuFabricInfoV_t,
    )
    gpu = PynvmlReader(lib).read().gpus[0]
    assert gpu.fabric_state == fabric.FABRIC_STATE_IN_PROGRESS
    assert gpu.fabric_cluster_uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"
    assert (gpu.fabric_status, gpu.fabric_clique_id) == (0, 7)
    plain = PynvmlReader(fake_pynvml()).read().gpus[0]  # bindings without the call
    assert plain.fabric_state is None


# ---------------------------------------------------------------- the suite (wiring)


def test_suite_on_recordings(tmp_path: Path) -> None:
    rec = load("hgx-h200")
    rec["infiniband"]["mlx5_4"]["1"]["phys_state"] = "2: Polling"
    rec["infiniband"]["mlx5_4"]["1"]["state"] = "1: DOWN"
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(rec))
    run = run_suite(tmp_path, f"--nvml-recording={path}", "-k", "fabric or ib_ports or gpudirect")
    assert run.rc == 1, run.out
    assert {run.find(n)["status"] for n in CHECKS if n != "ib_ports"} == {"pass"}
    assert run.find("ib_ports")["remedy"] == ibports.PORT_REMEDY
    pinned = run_suite(
        tmp_path, f"--nvml-recording={path}", "--ib-ports=mlx5_0:1,mlx5_1:1",
        "--ib-min-rate=400", "-k", "ib_ports",
    )  # fmt: skip
    assert pinned.rc == 0 and pinned.find("ib_ports")["status"] == "pass", pinned.out


# ---------------------------------------------------------------- NCCL transport


def ranks(name: str) -> list[nccltransport.RankTransport]:
    return nccltransport.parse((NCCL / name).read_text().splitlines())


ACTIVE = {"hgx-h100-01": ["mlx5_0:1", "mlx5_1:1"], "hgx-h100-02": ["mlx5_0:1"]}


def test_nccl_ib_with_gdr_passes_and_reports_gdr_per_rank() -> None:
    got = ranks("ib-gdr.log")
    assert [(r.rank, r.host, r.transport, r.gdr) for r in got] == [
        (0, "hgx-h100-01", "IB+GDR", True),
        (1, "hgx-h100-01", "IB+GDR", True),
        (2, "hgx-h100-02", "IB+GDR", True),
        (3, "hgx-h100-02", "IB+GDR", True),
    ]
    assert got[0].ib_devices == ["mlx5_0:1/IB", "mlx5_1:1/IB"]
    record = nccltransport.nccl_transport(got, ACTIVE)
    assert record.status == "pass" and "GPUDirect RDMA on ranks [0, 1, 2, 3]" in record.message


def test_nccl_ib_without_gdr_warns() -> None:
    got = ranks("ib-no-gdr.log")
    assert {r.transport for r in got} == {"IB"} and {r.gdr for r in got} == {False}
    record = nccltransport.nccl_transport(got, ACTIVE)
    assert record.status == "warn" and record.remedy == nccltransport.GDR_REMEDY


def test_nccl_socket_fallback_fails_where_ib_ports_are_active() -> None:
    got = ranks("socket-fallback.log")
    assert {r.transport for r in got} == {"Socket"}
    assert got[0].socket_devices == ["eth0:10.0.0.1<0>"]
    record = nccltransport.nccl_transport(got, ACTIVE)
    assert record.status == "fail" and record.remedy == nccltransport.SOCKET_REMEDY
    assert "rank 0 (hgx-h100-01)" in record.message
    # no active IB/RoCE port anywhere: sockets are the only transport, not a fault
    assert nccltransport.nccl_transport(got, {"hgx-h100-01": []}).status == "pass"


def test_nccl_single_node_and_skips() -> None:
    got = ranks("single-node-p2p.log")
    assert [r.transport for r in got] == ["intra-node (P2P)"] * 2
    assert nccltransport.nccl_transport(got, ACTIVE).status == "pass"
    gloo = nccltransport.nccl_transport([], ACTIVE, backend="gloo")
    assert gloo.status == "skip" and "backend gloo" in gloo.message
    assert nccltransport.nccl_transport([], ACTIVE).status == "skip"


def test_node_record_reads_the_rank_logs_and_this_nodes_ports(tmp_path: Path) -> None:
    logs, ib = tmp_path / "ranks", tmp_path / "ib"
    logs.mkdir()
    text = (NCCL / "socket-fallback.log").read_text().splitlines()
    for pid in ("31842", "31843"):  # this node's two ranks, one file each (%h.%p)
        lines = [ln for ln in text if ln.startswith(f"hgx-h100-01:{pid}:")]
        (logs / f"nccl.hgx-h100-01.{pid}.log").write_text("\n".join(lines) + "\n")
    (logs / "rank0.json").write_text("{}")
    assert nccltransport.node_record(logs, "nccl", ib).status == "pass"  # no HCA here
    port = ib / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    for name, value in load("hgx-h100")["infiniband"]["mlx5_0"]["1"].items():
        (port / name).write_text(value + "\n")
    record = nccltransport.node_record(logs, "nccl", ib)
    assert record.status == "fail" and "hgx-h100-01: mlx5_0:1" in record.message
    assert [r["rank"] for r in record.value] == [0, 1]
    assert nccltransport.node_record(logs, "gloo", ib).status == "skip"
    env = nccltransport.debug_env(logs)
    assert env["NCCL_DEBUG_FILE"] == f"{logs}/nccl.%h.%p.log"


def test_recorded_platform_replays_to_the_same_facts(tmp_path: Path) -> None:
    rec = load("hgx-b200")
    facts = fabric.PlatformFacts.from_recording(rec)
    devices = pci.parse_lspci_nn("\n".join(rec["pci_devices"]))
    again = fabric.PlatformFacts.from_recording(fabric.record_platform(facts, devices))
    assert again == facts and len(again.nvswitches) == 2
    assert again.memory_peers == ("nv_mem",)
    del rec["memory_peers"]
    unread = fabric.PlatformFacts.from_recording(rec)
    assert unread.memory_peers is None
    assert fabric.PlatformFacts.from_recording(fabric.record_platform(unread, devices)) == unread
    here = fabric.record_facts()  # this machine: whatever it has, it must replay
    assert fabric.PlatformFacts.from_recording(here).infiniband == here["infiniband"]
    assert isinstance(here["memory_peers"], list)  # read on a live machine, even when empty


def test_read_platform_reads_the_memory_peers_root(tmp_path: Path) -> None:
    peers = tmp_path / "memory_peers"
    (peers / "nv_mem").mkdir(parents=True)
    (peers / "nv_mem" / "version").write_text("1.1\n")
    facts = fabric.read_platform(tmp_path / "pci", tmp_path / "ib", peers)
    assert facts.memory_peers == ("nv_mem",)
    assert (
        fabric.read_platform(tmp_path / "pci", tmp_path / "ib", tmp_path / "no").memory_peers == ()
    )


# ---------------------------------------------------------------- DCGM diagnostics


def test_dcgm_diag_json_to_records() -> None:
    text = (FIXTURES / "dcgm" / "diag-r1-gpu3-memory.json").read_text()
    records = {r.name: r for r in dcgm.parse("WARNING: a banner line\n" + text, level=1)}
    assert len(records) == 11  # 9 deployment tests (one null entry), memory, PCIe
    assert records["dcgm_nvml_library"].status == "pass"
    mem = records["dcgm_gpu_memory"]
    assert mem.status == "fail" and mem.remedy == dcgm.REMEDY
    assert "GPU 3: FAIL GPU 3 Error using CUDA API cudaMemcpy" in mem.message
    assert "(DCGM error id 30)" in mem.message
    assert isinstance(mem.value, dict) and mem.value["3"] == "fail" and mem.value["0"] == "pass"
    assert records["dcgm_pcie"].status == "skip"
    passing = json.loads(text)
    passing["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"][3] = {
        "gpu_ids": "3",
        "status": "Pass",
    }
    again = {r.name: r.status for r in dcgm.parse(json.dumps(passing))}
    assert again["dcgm_gpu_memory"] == "pass"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "no DCGM diagnostic object"),
        ("Error: unable to connect to host engine", "no DCGM diagnostic object"),
        ('{"DCGM GPU Diagnostic": {"runtime_error": "no GPUs"}}', "no GPUs"),
        ('{"DCGM GPU Diagnostic": {', "not JSON"),
    ],
)
def test_dcgm_output_without_results_fails(text: str, words: str) -> None:
    (record,) = dcgm.parse(text, level=2)
    assert record.name == "dcgm_diag" and record.status == "fail"
    assert words in record.message and "dcgmi diag -r 2" in record.message


def test_single_gpu_vm_skips_whatever_fabric_state_nvml_reports() -> None:
    """One SXM GPU handed to a VM may report a fabric state; with no NVSwitch in sight and
    no peer GPU there is no fabric to judge. Two such GPUs (shared NVSwitch
    virtualisation) are judged."""
    rec = load("hgx-h200")
    rec["pci_devices"] = [d for d in rec["pci_devices"] if "[0680]" not in d]
    rec["virtualization"] = "hypervisor (KVM)"
    rec["nvml"]["gpus"] = rec["nvml"]["gpus"][:1]
    rec["nvml"]["gpus"][0]["fabric_state"] = fabric.FABRIC_STATE_NOT_STARTED
    got = verdicts(rec)
    assert got["gpu_fabric_state"].status == "skip"
    assert "single GPU" in got["gpu_fabric_state"].message
    assert got["fabric_manager"].status == "skip"
    assert "virtual machine" in got["fabric_manager"].message
    rec["nvml"]["gpus"] = load("hgx-h200")["nvml"]["gpus"][:2]
    rec["nvml"]["gpus"][1]["fabric_state"] = fabric.FABRIC_STATE_IN_PROGRESS
    assert verdicts(rec)["gpu_fabric_state"].status == "fail"
