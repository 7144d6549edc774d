"""A node against its profile: one finding (a Record) per field that differs.

Nothing comes back for a field that matches, nor for a field the profile leaves unjudged
(``null``) or the node does not report (NVML ``None``): a healthy node gives an empty list.
Each finding names the GPU (index and PCI bus id) where it is about one, says what the
profile expects and what was found, and carries a remedy. ``fail``: a missing or unreadable
GPU, another GPU model, an NVLink down, a PCIe link below the profile, a fabric registration
not completed, an HCA port missing, down or below its rate, a driver off its pinned branch.
``warn``: more GPUs than the profile, less memory than the datasheet, a PCIe generation
below the profile on an idle GPU (the link downshifts to save power; the node check
re-reads it under load, as gpufleet.node.health.links does).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.inputs.profile_file import Profile
from gpufleet.node.ib_ports import IbPort
from gpufleet.node.nvml import NVML_ERROR_REMEDY, GpuReading, NodeReading
from gpufleet.node.profiles.profile_match import INVENTORY_VARIABLE
from gpufleet.results import Record, Status

GPU_COUNT = "profile_gpu_count"
GPU_UNREADABLE = "profile_gpu_unreadable"
GPU_MODEL = "profile_gpu_model"
GPU_MEMORY = "profile_gpu_memory"
NVLINK = "profile_nvlink"
PCIE_WIDTH = "profile_pcie_width"
PCIE_GENERATION = "profile_pcie_generation"
NVSWITCH_FABRIC = "profile_nvswitch_fabric"
IB_PORT_COUNT = "profile_ib_port_count"
IB_PORT_STATE = "profile_ib_port_state"
IB_PORT_RATE = "profile_ib_port_rate"
DRIVER_BRANCH = "profile_driver_branch"

MISSING_GPU_REMEDY = (
    "compare `nvidia-smi -L` with the profile, look for Xid 79 (GPU fell off the bus) in the "
    "kernel log (`journalctl -k | grep -i xid`), reseat the GPU (or the baseboard's cables) and "
    "open a hardware ticket if it stays missing; if the node is meant to have fewer GPUs (a "
    f"VM slice), add a profile for it and set {INVENTORY_VARIABLE}"
)
EXTRA_GPU_REMEDY = (
    f"more GPUs than the profile: set {INVENTORY_VARIABLE} to this system's profile "
    "(`gpufleet profile show` lists them)"
)
MODEL_REMEDY = (
    "check the part against the order (`nvidia-smi -q | grep -i 'product name'`), or set "
    f"{INVENTORY_VARIABLE} to the profile of this system"
)
MEMORY_REMEDY = (
    "check `nvidia-smi -q -d MEMORY` (MIG mode, a smaller SKU) and the part against the order"
)
NVLINK_REMEDY = (
    "check the NVSwitch fabric: `nvidia-smi nvlink -s`, that nvidia-fabricmanager runs at the "
    "driver's exact version (`systemctl status nvidia-fabricmanager`); reset the GPU "
    "(`nvidia-smi -r`); RMA the board if a link stays down"
)
PCIE_WIDTH_REMEDY = (
    "reseat or replace the GPU / riser and check the slot (`lspci -vv` LnkSta against LnkCap, "
    "PCIe AER errors in `journalctl -k`)"
)
PCIE_GEN_REMEDY = (
    "check the slot's PCIe speed setting in the BIOS and the riser / retimer (`lspci -vv` "
    "LnkSta against LnkCap); reseat or replace the GPU or riser"
)
PCIE_IDLE_REMEDY = (
    "idle GPUs lower the PCIe generation to save power: re-check under load (`gpufleet health` "
    "re-reads the link while the GPU is busy); if it stays low, " + PCIE_GEN_REMEDY
)
FABRIC_REMEDY = (
    "start nvidia-fabricmanager at the driver's exact version and wait for fabric state "
    "Completed (`nvidia-smi -q | grep -A4 Fabric`); reset the GPU if it stays In Progress"
)
IB_MISSING_REMEDY = (
    "check that the HCA is seen (`lspci | grep -i mellanox`, `ibstat`), that mlx5_core and "
    "mlx5_ib are loaded, and that the card is seated"
)
IB_DOWN_REMEDY = (
    "check the cable and the switch port (`ibstat`, `iblinkinfo`): Polling means no link "
    "partner; Down/Init without a subnet manager stays inactive (start opensm or check the "
    "fabric's SM)"
)
IB_RATE_REMEDY = (
    "check the cable / transceiver and the switch port (`ibstat`, `iblinkinfo`): a port below "
    "its rate has a lane down or a lower-rated cable; reseat or replace the cable"
)
DRIVER_REMEDY = (
    "install the pinned branch (inventory variable nvidia_driver_branch, then `make provision`) "
    "or change the profile's pin"
)
#: nvmlGpuFabricState_t: 1 not started, 2 in progress, 3 completed.
FABRIC_COMPLETED = 3
FABRIC_NOT_DONE = {1: "Not Started", 2: "In Progress"}
CLOCK_GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle
IDLE_NOTE = "idle: may be a power-saving downshift"
NO_LINKS_NOTE = (
    "NVML reports no NVLink on this GPU: a PCIe card, a VM without NVLink passthrough, or "
    "links that never trained"
)


def _record(
    name: str,
    status: Status,
    what: str,
    expected: object,
    found: object,
    remedy: str,
    *,
    node: str,
    gpu: GpuReading | None = None,
    detail: str = "",
) -> Record:
    where = f"GPU {gpu.label}: " if gpu is not None else ""
    extra = f" ({detail})" if detail else ""
    return Record(
        name=name,
        status=status,
        node=node,
        value=found,
        threshold=expected,
        remedy=remedy,
        message=f"{where}{what}: expected {expected}, found {found}{extra}. Fix: {remedy}",
        gpu=None if gpu is None else gpu.label,
    )


def _count(profile: Profile, snapshot: NodeReading, node: str) -> list[Record]:
    found, expected = len(snapshot.gpus), profile.gpu_count
    if found == expected:
        return []
    seen = ", ".join(g.label for g in snapshot.gpus) or "none"
    if found < expected:
        return [_record(
            GPU_COUNT, "fail", f"GPU count ({profile.title})", expected, found,
            MISSING_GPU_REMEDY, node=node,
            detail=f"{expected - found} missing; NVML enumerates: {seen}",
        )]  # fmt: skip
    return [_record(
        GPU_COUNT, "warn", f"GPU count ({profile.title})", expected, found, EXTRA_GPU_REMEDY,
        node=node, detail=f"NVML enumerates: {seen}",
    )]  # fmt: skip


def _is_idle(gpu: GpuReading) -> bool:
    return bool((gpu.clock_event_reasons or 0) & CLOCK_GPU_IDLE) or gpu.utilization_gpu == 0


def _pcie(profile: Profile, gpu: GpuReading, node: str) -> list[Record]:
    out: list[Record] = []
    want_w, cur_w, max_w = profile.pcie_width, gpu.pcie_width_current, gpu.pcie_width_max
    low_w = [w for w in (cur_w, max_w) if w is not None and want_w is not None and w < want_w]
    if low_w:
        out.append(_record(
            PCIE_WIDTH, "fail", "PCIe link width", f"x{want_w}", f"x{cur_w}", PCIE_WIDTH_REMEDY,
            node=node, gpu=gpu, detail=f"max x{max_w}",
        ))  # fmt: skip
    want_g, cur_g, max_g = profile.pcie_generation, gpu.pcie_gen_current, gpu.pcie_gen_max
    if want_g is None:
        return out
    if max_g is not None and max_g < want_g:
        out.append(_record(
            PCIE_GENERATION, "fail", "PCIe link generation (the most the GPU and slot reach)",
            f"Gen{want_g}", f"Gen{max_g}", PCIE_GEN_REMEDY, node=node, gpu=gpu,
            detail=f"current Gen{cur_g}",
        ))  # fmt: skip
    elif cur_g is not None and cur_g < want_g:
        idle = _is_idle(gpu)
        out.append(_record(
            PCIE_GENERATION, "warn" if idle else "fail", "PCIe link generation",
            f"Gen{want_g}", f"Gen{cur_g}", PCIE_IDLE_REMEDY if idle else PCIE_GEN_REMEDY,
            node=node, gpu=gpu,
            detail=f"max Gen{max_g}, GPU {IDLE_NOTE if idle else 'busy'}",
        ))  # fmt: skip
    return out


def _nvlink(profile: Profile, gpu: GpuReading, node: str) -> list[Record]:
    want = profile.nvlink_links
    if not want:
        return []
    active = [link for link, up in gpu.nvlink if up]
    if len(active) >= want:
        return []
    down = [link for link, up in gpu.nvlink if not up]
    detail = f"{len(gpu.nvlink)} present" + (f", inactive: {down}" if down else "")
    if not gpu.nvlink:
        detail = NO_LINKS_NOTE
    return [_record(
        NVLINK, "fail", "active NVLinks", want, len(active), NVLINK_REMEDY, node=node, gpu=gpu,
        detail=detail,
    )]  # fmt: skip


def _gpu(profile: Profile, gpu: GpuReading, node: str) -> list[Record]:
    if gpu.error is not None:
        remedy = NVML_ERROR_REMEDY.get(gpu.error_code or 0, MISSING_GPU_REMEDY)
        return [_record(
            GPU_UNREADABLE, "fail", "GPU readable through NVML", "readable", gpu.error, remedy,
            node=node, gpu=gpu,
        )]  # fmt: skip
    out: list[Record] = []
    if profile.gpu_names and gpu.name not in profile.gpu_names:
        out.append(_record(
            GPU_MODEL, "fail", "GPU model", " or ".join(profile.gpu_names), gpu.name or "unknown",
            MODEL_REMEDY, node=node, gpu=gpu,
        ))  # fmt: skip
    memory, want_gb = gpu.memory_total, profile.memory_gb
    if memory is not None and want_gb is not None and memory < want_gb * 1e9:
        out.append(_record(
            GPU_MEMORY, "warn", "GPU memory", f">= {want_gb:g} GB", f"{memory / 1e9:.1f} GB",
            MEMORY_REMEDY, node=node, gpu=gpu,
        ))  # fmt: skip
    out += _nvlink(profile, gpu, node)
    out += _pcie(profile, gpu, node)
    state = gpu.fabric_state
    if profile.nvswitch and state in FABRIC_NOT_DONE:
        out.append(_record(
            NVSWITCH_FABRIC, "fail", "NVSwitch fabric registration", "Completed",
            FABRIC_NOT_DONE[state], FABRIC_REMEDY, node=node, gpu=gpu,
        ))  # fmt: skip
    elif profile.nvswitch and state == FABRIC_COMPLETED and gpu.fabric_status not in (None, 0):
        out.append(_record(
            NVSWITCH_FABRIC, "fail", "NVSwitch fabric registration", "Completed, status 0",
            f"Completed, status {gpu.fabric_status}", FABRIC_REMEDY, node=node, gpu=gpu,
        ))  # fmt: skip
    return out


def _ib(profile: Profile, ports: Sequence[IbPort], node: str) -> list[Record]:
    want, rate, layer = profile.ib_ports, profile.ib_rate_gbps, profile.ib_link_layer
    if not want:
        return []
    mine = [p for p in ports if p.link_layer == layer]
    out: list[Record] = []
    if len(mine) < want:
        seen = ", ".join(p.name for p in mine) or "none"
        out.append(_record(
            IB_PORT_COUNT, "fail", f"{layer} ports", want, len(mine), IB_MISSING_REMEDY,
            node=node, detail=f"found: {seen}",
        ))  # fmt: skip
    for p in mine:
        if not p.active:
            out.append(_record(
                IB_PORT_STATE, "fail", f"port {p.name} state", "ACTIVE/LinkUp",
                f"{p.state or '?'}/{p.phys_state or '?'}", IB_DOWN_REMEDY, node=node,
            ))  # fmt: skip
        elif rate is not None and (p.rate_gbps or 0) < rate:
            half = " (half rate)" if p.rate_gbps and p.rate_gbps * 2 == rate else ""
            out.append(_record(
                IB_PORT_RATE, "fail", f"port {p.name} rate", f"{rate:g} Gb/sec",
                f"{p.rate_text or 'unknown'}{half}", IB_RATE_REMEDY, node=node,
            ))  # fmt: skip
    return out


def _driver(profile: Profile, snapshot: NodeReading, node: str) -> list[Record]:
    pin = profile.pins.get("driver_branch")
    if not pin or not snapshot.driver_version:
        return []
    branch = snapshot.driver_version.split(".", 1)[0]
    if branch == pin.strip():
        return []
    return [_record(
        DRIVER_BRANCH, "fail", "NVIDIA driver branch (profile pin)", pin,
        f"{branch} ({snapshot.driver_version})", DRIVER_REMEDY, node=node,
    )]  # fmt: skip


def diff(
    profile: Profile,
    snapshot: NodeReading,
    ib_ports: Sequence[IbPort] | None = None,
    node: str = "",
) -> list[Record]:
    """The findings of ``snapshot`` (and the HCA ports, when given) against ``profile``.

    ``ib_ports`` None: the ports were not read, so they are not compared (an empty list is
    "read, and none found")."""
    out = _count(profile, snapshot, node)
    for gpu in snapshot.gpus:
        out += _gpu(profile, gpu, node)
    if ib_ports is not None:
        out += _ib(profile, ib_ports, node)
    out += _driver(profile, snapshot, node)
    return out
