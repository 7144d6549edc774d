"""gpufleet.node.health: verdict edge cases that the recordings do not cover."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from gpufleet.node import health
from gpufleet.node.facts import (
    TorchFacts,
    parse_nvcc_release,
    read_torch_facts,
    torch_index_for,
    visible_devices,
)
from gpufleet.node.health import kernel_log
from gpufleet.node.nvml import GpuReading, NodeReading, NvmlUnavailable
from gpufleet.node.xid import XidEvent

GPU = GpuReading(
    index=0, pci_bus_id="00000000:3B:00.0", name="NVIDIA A100-SXM4-80GB",
    compute_capability=(8, 0), persistence_mode=True, ecc_enabled=True,
    ecc_volatile_uncorrected=0, remapped_rows_uncorrectable=0, remapped_rows_pending=False,
    remapped_rows_failure=False, pcie_gen_current=4, pcie_gen_max=4, pcie_width_current=16,
    pcie_width_max=16, clock_event_reasons=0, utilization_gpu=0,
)  # fmt: skip
NODE = NodeReading("550.54.15", 12040, (GPU,))
TF = TorchFacts("2.11.0+cu128", "12.8", True, 1, ("sm_80", "sm_90"), "2.28.9")


def test_thresholds_are_dcgm_values() -> None:
    assert health.DCGM_RETIRED_PAGES_LIMIT == 63
    assert health.DCGM_UNCORRECTABLE_REMAPS_LIMIT == 512
    assert health.CLOCK_REASONS_FAIL == 0x8 | 0x40 | 0x80
    assert health.CLOCK_REASONS_WARN & 0x4


def test_retired_pages_boundary() -> None:
    ok = replace(GPU, retired_pages_sbe=40, retired_pages_dbe=22, retired_pages_pending=False)
    assert health.page_retirement(ok).status == "pass"  # 62 < 63
    bad = replace(ok, retired_pages_dbe=23)
    assert health.page_retirement(bad).status == "fail"


def test_row_remap_boundary() -> None:
    assert health.row_remap(replace(GPU, remapped_rows_uncorrectable=511)).status == "pass"
    rec = health.row_remap(replace(GPU, remapped_rows_uncorrectable=512))
    assert rec.status == "fail"
    assert rec.gpu == "0 (00000000:3B:00.0)"
    assert rec.value["uncorrectable"] == 512


def test_pcie_idle_then_loaded() -> None:
    idle = replace(GPU, pcie_gen_current=1, clock_event_reasons=health.CLOCK_GPU_IDLE)
    assert health.pcie_link(idle).status == "warn"
    busy_ok = replace(idle, pcie_gen_current=4, utilization_gpu=100, clock_event_reasons=0)
    assert health.pcie_link(idle, under_load=busy_ok).status == "pass"
    assert "under load" in health.pcie_link(idle, under_load=busy_ok).message
    busy_low = replace(busy_ok, pcie_gen_current=2)
    assert health.pcie_link(idle, under_load=busy_low).status == "fail"
    # a reading under load that failed falls back to the idle verdict
    lost = GpuReading(index=0, error="GPU is lost", error_code=15)
    assert health.pcie_link(idle, under_load=lost).status == "warn"


def test_pcie_width_fails_even_when_idle() -> None:
    narrow = replace(GPU, pcie_width_current=8, clock_event_reasons=health.CLOCK_GPU_IDLE)
    assert health.pcie_link(narrow).status == "fail"


def test_pcie_unknown_utilisation_not_idle_without_idle_bit() -> None:
    g = replace(GPU, pcie_gen_current=3, utilization_gpu=None, clock_event_reasons=0)
    assert health.pcie_link(g).status == "fail"


@pytest.mark.parametrize(
    ("mask", "status"),
    [(0x0, "pass"), (0x1, "pass"), (0x10, "pass"), (0x2, "pass"), (0x4, "warn"),
     (0x20, "warn"), (0x8, "fail"), (0x40, "fail"), (0x80, "fail"), (0x84, "fail")],
)  # fmt: skip
def test_clock_event_reasons(mask: int, status: str) -> None:
    assert health.clock_event_reasons(replace(GPU, clock_event_reasons=mask)).status == status


def test_nvlink_partial_fails_all_down_warns() -> None:
    links = tuple((i, True) for i in range(18))
    assert health.nvlink(replace(GPU, nvlink=links)).status == "pass"
    assert health.nvlink(replace(GPU, nvlink=((*links[:17], (17, False))))).status == "fail"
    all_down = tuple((i, False) for i in range(18))
    rec = health.nvlink(replace(GPU, nvlink=all_down))
    assert rec.status == "warn"
    assert "fabricmanager" in rec.remedy
    assert health.nvlink(GPU).status == "skip"


def test_clock_reason_names_unknown_bits() -> None:
    assert health.clock_reason_names(0x1 | 0x1000) == ["GPU idle", "unknown 0x1000"]


def test_cpu_wheel_expectations() -> None:
    cpu = TorchFacts("2.11.0+cpu", None, False, 0, (), None)
    assert health.torch_cuda_version(cpu, "12.8", "cpu").status == "pass"
    assert health.torch_cuda_version(cpu, "12.8", "cu128").status == "fail"
    assert health.torch_cuda_available(cpu, "cpu").status == "skip"
    assert health.torch_cuda_available(cpu, "cu128").status == "fail"
    assert health.nccl_version(cpu, "2.28.9").status == "skip"
    assert health.torch_arch(GPU, cpu).status == "skip"


def test_torch_import_failure_is_a_failure() -> None:
    broken = TorchFacts("", None, False, 0, (), None, error="import torch failed: No module")
    rec = health.torch_cuda_version(broken, "12.8", "cu128")
    assert rec.status == "fail"
    assert "torch_env" in rec.remedy


def test_cuda_driver_version_rules() -> None:
    assert health.cuda_driver_version(NODE, "12.4").status == "pass"
    assert health.cuda_driver_version(NODE, "12.8").status == "warn"
    assert health.cuda_driver_version(NODE, "13.0").status == "fail"
    assert health.cuda_driver_version(NODE, None).status == "skip"


def test_driver_version_compares_numerically() -> None:
    assert health.driver_version(NODE, "525.60.13").status == "pass"
    assert (
        health.driver_version(replace(NODE, driver_version="525.105.17"), "525.60.13").status
        == "pass"
    )
    assert (
        health.driver_version(replace(NODE, driver_version="525.6.1"), "525.60.13").status == "fail"
    )
    assert health.driver_version(NODE, None).status == "skip"


def test_gpu_count_default_compares_with_pci() -> None:
    assert health.gpu_count(NODE, None, 1).status == "pass"
    assert health.gpu_count(NODE, None, None).status == "pass"
    assert health.gpu_count(NODE, None, 2).status == "warn"
    assert health.gpu_count(replace(NODE, gpus=()), None, 0).status == "fail"
    assert health.gpu_count(NODE, 2, 2).status == "fail"


def test_no_driver_records() -> None:
    err = NvmlUnavailable(12)
    assert health.no_driver("x", err, require_gpu=False).status == "skip"
    assert health.no_driver("x", err, require_gpu=True).status == "fail"
    broken = NvmlUnavailable(18)
    assert health.no_driver("x", broken, require_gpu=False).status == "fail"
    assert health.no_gpus("x", require_gpu=False).status == "skip"
    assert health.no_gpus("x", require_gpu=True).status == "fail"


def test_every_failure_names_gpu_value_threshold_remedy() -> None:
    bad = replace(
        GPU, persistence_mode=False, ecc_volatile_uncorrected=1, remapped_rows_failure=True,
        pcie_width_current=4, nvlink=((0, True), (1, False)), clock_event_reasons=0x40,
    )  # fmt: skip
    tf = replace(TF, arch_list=("sm_90",))
    for rec in (
        health.persistence_mode(bad), health.ecc_uncorrectable(bad), health.row_remap(bad),
        health.pcie_link(bad), health.nvlink(bad), health.clock_event_reasons(bad),
        health.torch_arch(bad, tf),
    ):  # fmt: skip
        assert rec.status == "fail", rec
        assert rec.message.startswith("GPU 0 (00000000:3B:00.0): "), rec
        assert rec.gpu == "0 (00000000:3B:00.0)"
        assert rec.value is not None
        assert rec.threshold is not None
        assert rec.remedy
        assert "Fix: " + rec.remedy in rec.message


def test_xid_errors_groups_and_names_gpus() -> None:
    now = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    events = [XidEvent(79, "0000:3b:00", now, ""), XidEvent(79, "0000:3b:00", now, ""),
              XidEvent(13, "0000:3b:00", now, "")]  # fmt: skip
    rec = health.xid_errors(events, [GPU], 2, now)
    assert rec.status == "fail"
    assert (
        "GPU 0 (00000000:3B:00.0): Xid 79 x2 (GPU has fallen off the bus; bus, RESTART_BM)"
        in rec.message
    )
    assert rec.value == [79]
    assert rec.remedy.startswith(
        "Xid 79 (RESTART_BM): restart the bare-metal machine (reboot; power-cycle if the GPU "
        "stays lost); drain the node before the restart"
    )
    passed = health.xid_errors(events[2:], [GPU], 2, now)
    assert passed.status == "pass"
    assert "non-critical Xids seen: [13]; 13: application, RESTART_APP" in passed.message


#: Rows of NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
#: (table "Xids": Code, Mnemonic, "Resolution Bucket (Immediate Action)"), written out here as
#: read there, not taken from XID_BUCKETS.
CATALOG_IMMEDIATE_ACTION = [
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45"),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48"),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS"),
    (56, "DISPLAY_CHANNEL_EXCEPTION", "CONTACT_SUPPORT"),  # Unused
    (57, "FB_LINK_TRAINING_FAILURE_ERROR", "CONTACT_SUPPORT"),  # Unused
    (58, "FB_MEMORY_ERROR", "CONTACT_SUPPORT"),  # Unused
    (61, "PMU_BREAKPOINT", "CONTACT_SUPPORT"),  # Unused
    (62, "PMU_HALT_ERROR", "RESET_GPU"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU"),
    (65, "ROBUST_CHANNEL_NVENC1_ERROR", "CONTACT_SUPPORT"),  # Unused
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP"),
    (73, "ROBUST_CHANNEL_NVENC2_ERROR", "CONTACT_SUPPORT"),  # Unused
    (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR"),
    (78, "VGPU_START_ERROR", "UPDATE_SWFW"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP"),
    (81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "CONTACT_SUPPORT"),  # Unused
    (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "RESET_GPU"),
    (120, "GSP_ERROR", "RESET_GPU"),
    (121, "C2C_ERROR", "IGNORE"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU"),
    (143, "GPU_INIT_ERROR", "RESET_GPU"),
    (144, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR"),
    (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR"),
    (150, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR"),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154"),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM"),
]


@pytest.mark.parametrize(
    ("xid", "mnemonic", "action"),
    CATALOG_IMMEDIATE_ACTION,
    ids=[str(r[0]) for r in CATALOG_IMMEDIATE_ACTION],
)
def test_xid_action_is_the_catalogs_immediate_action(xid: int, mnemonic: str, action: str) -> None:
    assert health.xid_bucket(xid).action == action, mnemonic


@pytest.mark.parametrize(
    ("xid", "family"),
    [(13, "application"), (48, "memory"), (63, "memory"), (79, "bus"), (74, "nvlink"),
     (145, "nvlink"), (119, "gsp"), (62, "engine"), (54, "power")],
)  # fmt: skip
def test_xid_family(xid: int, family: str) -> None:
    assert health.xid_bucket(xid).family == family


@pytest.mark.parametrize("xid", [0, 200, 9999])
def test_an_xid_not_in_the_table_gets_the_unknown_bucket(xid: int) -> None:
    assert xid not in health.XID_BUCKETS
    assert health.xid_bucket(xid) == health.XidBucket("unknown", "CONTACT_SUPPORT")


def test_every_action_in_the_table_says_what_to_do() -> None:
    """Each action the table uses (and the unknown bucket's) has its guidance in the remedy."""
    actions = {b.action for b in health.XID_BUCKETS.values()} | {"CONTACT_SUPPORT"}
    assert actions <= set(kernel_log.ACTION_GUIDANCE)
    for xid, bucket in health.XID_BUCKETS.items():
        remedy = kernel_log.xid_remedy(xid)
        assert remedy.startswith(f"Xid {xid} ({bucket.action}): ")
        assert kernel_log.ACTION_GUIDANCE[bucket.action] in remedy


def test_every_critical_xid_has_a_bucket() -> None:
    from gpufleet.node.xid import CRITICAL_XIDS

    assert CRITICAL_XIDS <= set(health.XID_BUCKETS)


def test_unreadable_kernel_log_is_incomplete_with_a_remedy() -> None:
    rec = health.kernel_log_unreadable("journalctl: rc=1; dmesg: Operation not permitted")
    assert rec.status == "incomplete"
    assert "dmesg: Operation not permitted" in rec.message
    assert "--kernel-log" in rec.remedy and "Fix: " + rec.remedy in rec.message


@pytest.mark.parametrize(("code", "status"), [(10, "incomplete"), (27, "incomplete"), (15, "fail")])
def test_nvml_timeout_on_a_gpu_is_incomplete_a_lost_gpu_fails(code: int, status: str) -> None:
    gpu = replace(GPU, error=f"NVML error {code}", error_code=code)
    rec = health.gpu_unreadable("persistence_mode", gpu)
    assert rec is not None and rec.status == status
    assert rec.remedy


def test_toolkit_from_plan() -> None:
    assert health.toolkit_from_plan({"toolkit_prefix": "/usr/local/cuda-12.8"}) == "12.8"
    assert health.toolkit_from_plan({"toolkit_package": "cuda-toolkit-13-0"}) == "13.0"
    assert health.toolkit_from_plan({"toolkit_prefix": None}) is None


def test_nodefacts_parsers() -> None:
    out = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.8, V12.8.93\n"
    assert parse_nvcc_release(out) == "12.8"
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 2"}) == ["0", "2"]


def test_read_torch_facts_on_this_machine() -> None:
    torch = pytest.importorskip("torch")
    tf = read_torch_facts()
    assert tf.version == torch.__version__
    assert tf.cuda == torch.version.cuda
    if torch.version.cuda is None:  # the CPU build of make setup
        assert (tf.cuda_available, tf.device_count, tf.arch_list, tf.nccl) == (False, 0, (), None)
        assert tf.error is None


def test_torch_index_for_maps_by_pci_bus_id() -> None:
    tf = replace(TF, device_count=2, pci_bus_ids=("0000:b7:00.0", "0000:3b:00.0"))
    assert torch_index_for("00000000:3B:00.0", tf) == 1  # CUDA order differs from NVML's
    assert torch_index_for("00000000:B7:00.0", tf) == 0
    assert torch_index_for("00000000:18:00.0", tf) is None  # hidden by CUDA_VISIBLE_DEVICES
    assert torch_index_for("", tf) is None
    assert torch_index_for("00000000:3B:00.0", replace(tf, cuda_available=False)) is None
