"""NVSwitch systems (HGX/DGX): NVSwitch detection, Fabric Manager and the GPU fabric state.

An 8-GPU HGX/DGX board joins its GPUs through NVSwitch chips. NVIDIA Fabric Manager
(daemon ``nv-fabricmanager``, unit ``nvidia-fabricmanager.service``) trains that fabric and
registers every GPU with it; a GPU's fabric state then goes Not Started -> In Progress ->
Completed. Without a running Fabric Manager, CUDA initialisation fails with error 802
("system not yet initialized"), and Fabric Manager refuses to start unless its version
equals the driver's exactly. Sources:

* NVIDIA Fabric Manager user guide,
  https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html
* NVML ``nvmlDeviceGetGpuFabricInfoV`` / ``nvmlGpuFabricState_t``,
  https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
* CUDA error 802 without Fabric Manager, NVIDIA NIM troubleshooting,
  https://docs.nvidia.com/nim/large-language-models/latest/troubleshooting.html

NVSwitches are PCI devices of vendor 0x10de and class 0x0680 ("bridge: other"), so they
are found without a driver, the way :func:`gpufleet.node.facts.pci_nvidia_gpus` finds GPUs.

The readers here touch the system (sysfs, ``systemctl``, ``nv-fabricmanager``); the
verdicts (:func:`fabric_manager`, :func:`gpu_fabric_state`) are pure functions of
:class:`PlatformFacts` and the NVML reading. Every fact has a JSON form so a recording
(``gpufleet nvml record --full --output FILE``) replays it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.node.health._common import rec as make_record
from gpufleet.node.nvml import NodeReading, NvmlUnavailable
from gpufleet.planning.pci import (
    NVIDIA_VENDOR,
    PciDevice,
    nvswitches,
    parse_lspci_nn,
    read_pci_sysfs,
)
from gpufleet.results import Record

FABRIC_MANAGER = "fabric_manager"
GPU_FABRIC_STATE = "gpu_fabric_state"

FM_UNIT = "nvidia-fabricmanager.service"
FM_BINARY = "nv-fabricmanager"

# nvmlGpuFabricState_t (nvml.h; nvidia-ml-py NVML_GPU_FABRIC_STATE_*)
FABRIC_STATE_NOT_SUPPORTED = 0
FABRIC_STATE_NOT_STARTED = 1
FABRIC_STATE_IN_PROGRESS = 2
FABRIC_STATE_COMPLETED = 3
FABRIC_STATE_NAMES: Mapping[int, str] = {
    FABRIC_STATE_NOT_SUPPORTED: "Not Supported",
    FABRIC_STATE_NOT_STARTED: "Not Started",
    FABRIC_STATE_IN_PROGRESS: "In Progress",
    FABRIC_STATE_COMPLETED: "Completed",
}
#: A cluster UUID of all zeroes means "not assigned".
NULL_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"

FM_REMEDY = (
    "install nvidia-fabricmanager of exactly the driver's version (`make provision` does on "
    "NVSwitch nodes, role nvidia_driver; EL: the driver module stream's fm profile), then "
    "`systemctl enable --now nvidia-fabricmanager`; see `journalctl -u nvidia-fabricmanager`"
)
FM_VERSION_REMEDY = (
    "install the nvidia-fabricmanager package whose version equals the driver's and lock "
    "both to the same version (Fabric Manager refuses to start on a mismatch), then "
    "`systemctl restart nvidia-fabricmanager`"
)
FABRIC_REMEDY = (
    "wait for Fabric Manager to finish training the fabric; if the state does not reach "
    "Completed, check `systemctl status nvidia-fabricmanager`, "
    "/var/log/fabricmanager.log and `nvidia-smi -q | grep -A3 Fabric`, then restart "
    "Fabric Manager or reset the GPUs"
)


# ---------------------------------------------------------------- platform facts


@dataclass(frozen=True)
class FabricManagerFacts:
    """``nvidia-fabricmanager.service``: its state and the installed daemon's version."""

    active_state: str | None  # systemd ActiveState: active, inactive, failed, ...
    load_state: str | None = None  # systemd LoadState: loaded, not-found, masked
    version: str | None = None  # "570.133.20" from `nv-fabricmanager --version`
    error: str | None = None  # why the facts could not be read (no systemd, ...)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> FabricManagerFacts:
        if not data:
            return cls(active_state="inactive", load_state="not-found")
        return cls(
            active_state=data.get("active_state"),
            load_state=data.get("load_state"),
            version=data.get("version"),
            error=data.get("error"),
        )


@dataclass(frozen=True)
class PlatformFacts:
    """The non-NVML facts of the fabric and network checks."""

    nvswitches: tuple[str, ...] = ()  # PCI addresses
    pci_readable: bool = True
    virtualization: str | None = None  # "hypervisor" (CPU flag) or a DMI vendor; None: bare metal
    fabric_manager: FabricManagerFacts = field(
        default_factory=lambda: FabricManagerFacts(active_state=None)
    )
    infiniband: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)
    #: peer-memory clients registered with ib_core (/sys/kernel/mm/memory_peers/<c>/version);
    #: None: not read (a recording without the memory_peers section)
    memory_peers: tuple[str, ...] | None = None

    @classmethod
    def from_recording(cls, rec: Mapping[str, Any]) -> PlatformFacts:
        """The recording's sections; an absent section means "not present"."""
        pci = rec.get("pci_devices")
        peers = rec.get("memory_peers")
        return cls(
            nvswitches=tuple(nvswitches(parse_lspci_nn("\n".join(pci or ())))),
            pci_readable=True,
            virtualization=rec.get("virtualization"),
            fabric_manager=FabricManagerFacts.from_dict(rec.get("fabric_manager")),
            infiniband=rec.get("infiniband") or {},
            memory_peers=None if peers is None else tuple(peers),
        )


def parse_fm_version(text: str) -> str | None:
    """ "Fabric Manager version is : 570.133.20" -> "570.133.20"."""
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return m[1] if m else None


def detect_virtualization(cpuinfo: str, sys_vendor: str = "") -> str | None:
    """ "hypervisor" when the CPU flags say so (x86 guests), else None (bare metal)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and " hypervisor" in f" {line.split(':', 1)[-1]}":
            return "hypervisor" + (f" ({sys_vendor.strip()})" if sys_vendor.strip() else "")
    return None


def _run(argv: Sequence[str], timeout_s: float = 10.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout


def read_fabric_manager() -> FabricManagerFacts:
    """The unit's state (``systemctl show``) and the daemon's version."""
    out = _run(["systemctl", "show", "-p", "ActiveState,LoadState", FM_UNIT])
    if out is None:
        return FabricManagerFacts(active_state=None, error="systemctl not available")
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    version_out = _run([FM_BINARY, "--version"])
    return FabricManagerFacts(
        active_state=props.get("ActiveState") or None,
        load_state=props.get("LoadState") or None,
        version=None if version_out is None else parse_fm_version(version_out),
    )


def read_platform(
    pci_root: Path = Path("/sys/bus/pci/devices"),
    ib_root: Path = Path("/sys/class/infiniband"),
    peers_root: Path = Path("/sys/kernel/mm/memory_peers"),
) -> PlatformFacts:
    """Read this machine's facts (sysfs, /proc/cpuinfo, systemd)."""
    from gpufleet.node.ib_ports import (  # noqa: PLC0415 (ibports imports this module)
        read_ib_sysfs,
        read_memory_peers,
    )

    devices = read_pci_sysfs(pci_root)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    try:
        vendor = Path("/sys/class/dmi/id/sys_vendor").read_text(encoding="utf-8")
    except OSError:
        vendor = ""
    switches = tuple(nvswitches(devices or []))
    return PlatformFacts(
        nvswitches=switches,
        pci_readable=devices is not None,
        virtualization=detect_virtualization(cpuinfo, vendor),
        fabric_manager=read_fabric_manager() if switches else FabricManagerFacts(None),
        infiniband=read_ib_sysfs(ib_root),
        memory_peers=read_memory_peers(peers_root),
    )


def record_facts() -> dict[str, Any]:
    """This machine's fabric/network sections of a recording (``gpufleet nvml record --full``)."""
    return record_platform(read_platform(), read_pci_sysfs() or [])


def record_platform(facts: PlatformFacts, pci_devices: Sequence[PciDevice]) -> dict[str, Any]:
    """The recording sections of these facts (see docs/checks.md, Recordings)."""
    fm = facts.fabric_manager
    return {
        "pci_devices": [
            f"{d.address} Class [{d.pci_class}]: Device [{d.vendor}:{d.device}]"
            for d in pci_devices
            if d.vendor == NVIDIA_VENDOR
        ],
        "virtualization": facts.virtualization,
        "fabric_manager": {
            "active_state": fm.active_state,
            "load_state": fm.load_state,
            "version": fm.version,
            "error": fm.error,
        },
        "infiniband": {h: dict(p) for h, p in facts.infiniband.items()},
        "memory_peers": None if facts.memory_peers is None else list(facts.memory_peers),
    }


# ---------------------------------------------------------------- verdicts


def not_nvswitch(name: str, facts: PlatformFacts) -> Record | None:
    """The skip of a fabric check on a machine without NVSwitch; None on an NVSwitch system."""
    if facts.nvswitches:
        return None
    if not facts.pci_readable:
        why = "PCI bus not readable (/sys/bus/pci/devices absent)"
    elif facts.virtualization:
        why = (
            f"no NVSwitch on the PCI bus of this virtual machine ({facts.virtualization}); "
            "with shared NVSwitch virtualisation Fabric Manager runs on the host"
        )
    else:
        why = "no NVSwitch on the PCI bus (PCIe GPUs or no NVSwitch system): no fabric to manage"
    return make_record(name, "skip", why, value=0)


def fabric_manager(
    facts: PlatformFacts, reading: NodeReading | None, nvml_error: NvmlUnavailable | None = None
) -> Record:
    """Fabric Manager active on an NVSwitch system, its version equal to the driver's."""
    skip = not_nvswitch(FABRIC_MANAGER, facts)
    if skip is not None:
        return skip
    n = len(facts.nvswitches)
    fm = facts.fabric_manager
    if fm.active_state is None:
        return make_record(
            FABRIC_MANAGER, "fail",
            f"{n} NVSwitch(es) on the PCI bus, but the state of {FM_UNIT} cannot be read "
            f"({fm.error or 'unknown'}).",
            value=None, threshold="active", remedy=FM_REMEDY,
        )  # fmt: skip
    if fm.load_state == "not-found" or fm.active_state != "active":
        what = "is not installed" if fm.load_state == "not-found" else f"is {fm.active_state}"
        return make_record(
            FABRIC_MANAGER, "fail",
            f"{n} NVSwitch(es) on the PCI bus, but {FM_UNIT} {what}: CUDA cannot initialise "
            "(error 802) until Fabric Manager has trained the fabric.",
            value=fm.active_state, threshold="active", remedy=FM_REMEDY,
        )  # fmt: skip
    driver = None if reading is None else reading.driver_version
    if driver is None:
        why = "no NVIDIA driver" if nvml_error is None else str(nvml_error)
        return make_record(
            FABRIC_MANAGER, "fail",
            f"{FM_UNIT} is active but the driver's version cannot be read ({why}).",
            value=fm.version, threshold="driver version", remedy=FM_VERSION_REMEDY,
        )  # fmt: skip
    if fm.version != driver:
        return make_record(
            FABRIC_MANAGER, "fail",
            f"Fabric Manager version {fm.version or 'unknown'} != driver {driver}.",
            value=fm.version, threshold=driver, remedy=FM_VERSION_REMEDY,
        )  # fmt: skip
    return make_record(
        FABRIC_MANAGER, "pass",
        f"{FM_UNIT} active, version {fm.version} = driver; {n} NVSwitch(es).",
        value=fm.version, threshold=driver,
    )  # fmt: skip


def fabric_state_name(state: int | None) -> str:
    return "unknown" if state is None else FABRIC_STATE_NAMES.get(state, f"state {state}")


def gpu_fabric_state(facts: PlatformFacts, reading: NodeReading) -> Record:
    """Every GPU's NVML fabric state Completed, status success, one cluster UUID."""
    supported = [
        g for g in reading.gpus
        if g.fabric_state is not None and g.fabric_state != FABRIC_STATE_NOT_SUPPORTED
    ]  # fmt: skip
    if supported and not facts.nvswitches and len(reading.gpus) == 1:
        seen = fabric_state_name(reading.gpus[0].fabric_state)
        return make_record(
            GPU_FABRIC_STATE, "skip",
            f"a single GPU and no NVSwitch on the PCI bus: no NVLink fabric to join "
            f"(NVML reports fabric state {seen})",
            value=seen,
        )  # fmt: skip
    if not supported:
        skip = not_nvswitch(GPU_FABRIC_STATE, facts)
        if skip is not None:
            return skip
        if not reading.gpus:
            return make_record(GPU_FABRIC_STATE, "skip", "no NVIDIA GPU visible to NVML")
        return make_record(
            GPU_FABRIC_STATE, "fail",
            f"{len(facts.nvswitches)} NVSwitch(es) on the PCI bus, but NVML reports no GPU "
            "fabric state (driver too old, or the GPUs are not on the fabric).",
            value=None, threshold=fabric_state_name(FABRIC_STATE_COMPLETED),
            remedy=FABRIC_REMEDY,
        )  # fmt: skip
    bad: list[str] = []
    for g in reading.gpus:
        if g.error is not None:
            bad.append(f"GPU {g.label}: unreadable ({g.error})")
        elif g.fabric_state != FABRIC_STATE_COMPLETED:
            bad.append(f"GPU {g.label}: state {fabric_state_name(g.fabric_state)}")
        elif g.fabric_status not in (None, 0):
            bad.append(f"GPU {g.label}: fabric status NVML error {g.fabric_status}")
    uuids = sorted(
        {g.fabric_cluster_uuid for g in supported if g.fabric_cluster_uuid} - {NULL_CLUSTER_UUID}
    )
    value = {
        g.label: {
            "state": fabric_state_name(g.fabric_state),
            "status": g.fabric_status,
            "cluster_uuid": g.fabric_cluster_uuid,
            "clique_id": g.fabric_clique_id,
        }
        for g in reading.gpus
    }
    if not bad and len(uuids) != 1:
        bad.append(
            "GPUs report no cluster UUID"
            if not uuids
            else f"{len(uuids)} cluster UUIDs: " + ", ".join(uuids)
        )
    if bad:
        return make_record(
            GPU_FABRIC_STATE, "fail", "NVSwitch fabric not ready: " + "; ".join(bad) + ".",
            value=value, threshold="Completed, status success, one cluster UUID",
            remedy=FABRIC_REMEDY,
        )  # fmt: skip
    return make_record(
        GPU_FABRIC_STATE, "pass",
        f"{len(supported)} GPU(s) fabric state Completed in cluster {uuids[0]}.",
        value=value, threshold="Completed, status success, one cluster UUID",
    )  # fmt: skip
