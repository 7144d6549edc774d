"""Kernel log check: critical Xid events (see :mod:`gpufleet.node.xid`), each with NVIDIA's
resolution bucket.

NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
column "Resolution Bucket (Immediate Action)") files every Xid under an action, spelled as
the catalog spells it: ``RESTART_APP`` (restart the application, the GPU stays usable),
``RESET_GPU``, ``RESTART_BM`` (restart the bare-metal machine), ``RESTART_VM``,
``CONTACT_SUPPORT``, ``IGNORE``, ``CHECK_MECHANICALS``, ``CHECK_UVM``, ``UPDATE_SWFW``,
``XID_154`` and the workflows ``WORKFLOW_XID_45``, ``WORKFLOW_XID_48``,
``WORKFLOW_NVLINK_ERR``, ``WORKFLOW_NVLINK5_ERR``. :data:`XID_BUCKETS` keeps that action with
the fault family gpufleet reports (application, memory, bus, power, nvlink, c2c, gsp, engine,
vgpu, security, recovery), so a record says both what broke and what to do;
:data:`ACTION_GUIDANCE` turns each action into the steps an admin takes (the catalog's
"Fault Resolution Buckets" sheet, in short).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpufleet.node.health._common import rec
from gpufleet.node.health.names import XID
from gpufleet.node.nvml import GpuReading
from gpufleet.node.xid import XID_REMEDY, XidEvent, pci_key
from gpufleet.results import Record


@dataclass(frozen=True)
class XidBucket:
    """The family of an Xid and NVIDIA's immediate action for it."""

    family: str  # application, memory, bus, power, nvlink, c2c, gsp, engine, ..., unknown
    action: str  # the catalog's immediate action: RESTART_APP, RESET_GPU, RESTART_BM, ...

    def __str__(self) -> str:
        return f"{self.family}, {self.action}"


_APP = XidBucket("application", "RESTART_APP")
#: Xid -> bucket: only Xids the catalog lists, with its immediate action ("Unused": the
#: catalog's description on A100/H100/B100/GB200, deprecated or V100 and older; most of them
#: are in CRITICAL_XIDS); others: :data:`UNKNOWN_BUCKET`.
XID_BUCKETS: dict[int, XidBucket] = {
    8: _APP,  # GPU stopped processing (idle timeout)
    13: _APP, 31: _APP,  # graphics engine exception, MMU fault: usually the application
    43: XidBucket("application", "IGNORE"),  # the app hit a fault and ended; GPU healthy
    45: XidBucket("application", "WORKFLOW_XID_45"),  # cleanup after another error
    48: XidBucket("memory", "WORKFLOW_XID_48"),  # double-bit ECC
    57: XidBucket("memory", "CONTACT_SUPPORT"),  # Unused (FB link training)
    58: XidBucket("memory", "CONTACT_SUPPORT"),  # Unused (FB memory error)
    63: XidBucket("memory", "IGNORE"),  # row remap / page retirement recorded
    64: XidBucket("memory", "RESET_GPU"),  # row remap / page retirement failed
    92: XidBucket("memory", "IGNORE"),  # high single-bit ECC rate
    94: XidBucket("memory", "RESTART_APP"),  # contained ECC: only the app that hit it dies
    95: XidBucket("memory", "RESET_GPU"),  # uncontained ECC
    140: XidBucket("memory", "RESET_GPU"),  # ECC error escaped remap / page offlining
    32: XidBucket("bus", "RESTART_APP"),  # corrupted push buffer: mostly PCIe quality
    79: XidBucket("bus", "RESTART_BM"),  # fell off the bus
    54: XidBucket("power", "CHECK_MECHANICALS"),  # auxiliary power not connected
    74: XidBucket("nvlink", "WORKFLOW_NVLINK_ERR"),
    136: XidBucket("nvlink", "RESET_GPU"),  # link training failed
    137: XidBucket("nvlink", "IGNORE"),  # NVLink privilege error: usually the application
    **{x: XidBucket("nvlink", "WORKFLOW_NVLINK5_ERR") for x in range(144, 151)},
    155: XidBucket("nvlink", "RESET_GPU"),  # software-defined (intentional) link down
    121: XidBucket("c2c", "IGNORE"),  # corrected C2C link errors
    159: XidBucket("c2c", "CHECK_UVM"),  # CHI non-data error
    119: XidBucket("gsp", "RESET_GPU"), 120: XidBucket("gsp", "RESET_GPU"),
    46: XidBucket("engine", "RESET_GPU"),  # GPU stopped processing (GPU timeout)
    56: XidBucket("engine", "CONTACT_SUPPORT"),  # Unused (display channel exception)
    61: XidBucket("engine", "CONTACT_SUPPORT"),  # Unused (PMU breakpoint)
    62: XidBucket("engine", "RESET_GPU"),  # internal micro-controller halt
    65: XidBucket("engine", "CONTACT_SUPPORT"),  # Unused (NVENC1)
    68: XidBucket("engine", "RESTART_APP"),  # NVDEC0 exception
    69: XidBucket("engine", "RESTART_APP"),  # graphics engine class error
    73: XidBucket("engine", "CONTACT_SUPPORT"),  # Unused (NVENC2)
    80: XidBucket("engine", "RESTART_APP"),  # corrupted data sent to the GPU
    81: XidBucket("engine", "CONTACT_SUPPORT"),  # Unused (VGA subsystem)
    109: XidBucket("engine", "RESET_GPU"),  # context switch timeout
    143: XidBucket("engine", "RESET_GPU"),  # GPU initialization error
    158: XidBucket("engine", "RESET_GPU"),  # GPU fatal timeout
    78: XidBucket("vgpu", "UPDATE_SWFW"),  # vGPU start error
    110: XidBucket("security", "RESET_GPU"),  # security fault
    151: XidBucket("security", "RESTART_VM"),  # key rotation error
    154: XidBucket("recovery", "XID_154"),  # GPU recovery action changed
}  # fmt: skip
UNKNOWN_BUCKET = XidBucket("unknown", "CONTACT_SUPPORT")
#: What each catalog action asks of an admin (the catalog's "Fault Resolution Buckets").
ACTION_GUIDANCE: dict[str, str] = {
    "RESTART_APP": "restart the application; a GPU reset or reboot is not needed",
    "RESET_GPU": "stop every process on the GPU and reset it (nvidia-smi -r -i <gpu>); "
    "reboot if the reset fails",
    "RESTART_BM": "restart the bare-metal machine (reboot; power-cycle if the GPU stays lost)",
    "RESTART_VM": "restart the VM that owns the GPU; a GPU reset or machine restart is not needed",
    "CONTACT_SUPPORT": "contact your support organization or hardware vendor",
    "IGNORE": "no immediate action needed",
    "CHECK_MECHANICALS": "check that the GPU is seated and every connection to it "
    "(auxiliary power, cables) is secure",
    "CHECK_UVM": "if UVM or vGPU is in use, reset the GPU (nvidia-smi -r); otherwise no action",
    "UPDATE_SWFW": "update the driver, software and firmware to the latest versions (vGPU: "
    "guest and host drivers must be compatible)",
    "XID_154": "follow the recovery action the Xid 154 message names (None, Drain P2P, Drain "
    "and Reset, GPU Reset Required, Node Reboot Required)",
    "WORKFLOW_XID_45": "follow the other Xid logged with it; seen alone, restart Fabric "
    "Manager (systemctl restart nvidia-fabricmanager)",
    "WORKFLOW_XID_48": "alone: reset the GPU (nvidia-smi -r); with Xid 63 or 64: drain the "
    "node and reset the GPU; an SRAM error: if nvidia-smi shows the SRAM threshold exceeded, "
    "run field diagnostics",
    "WORKFLOW_NVLINK_ERR": "reset the GPU or reboot to clear it; decode the Xid's registers "
    "with NVIDIA's Xid catalog, check nvidia-smi nvlink and the link's connections",
    "WORKFLOW_NVLINK5_ERR": "decode the Xid's intrInfo and errorStatus with the catalog's "
    '"XID 144-150 Decode" sheet: it gives RESET_GPU or IGNORE per sub-code',
}
#: After the action, for a critical Xid without its own remedy (gpufleet.node.xid.XID_REMEDY).
RECUR_REMEDY = "if it recurs: inspect `nvidia-smi -q` and `journalctl -k`, open a hardware ticket"
KERNEL_LOG_REMEDY = (
    "let gpufleet read the kernel log: run as root or a member of systemd-journal (journalctl), "
    "or allow dmesg (sysctl kernel.dmesg_restrict=0); or pass --kernel-log FILE"
)


def xid_bucket(xid: int) -> XidBucket:
    return XID_BUCKETS.get(xid, UNKNOWN_BUCKET)


def xid_remedy(xid: int) -> str:
    """``Xid N (ACTION): what the action means; gpufleet's remedy for this Xid``."""
    action = xid_bucket(xid).action
    guidance = ACTION_GUIDANCE.get(action, "see NVIDIA's Xid catalog")
    return f"Xid {xid} ({action}): {guidance}; {XID_REMEDY.get(xid, RECUR_REMEDY)}"


def kernel_log_unreadable(problem: object) -> Record:
    """The Xid check could not run: neither journalctl nor dmesg answered (incomplete)."""
    return rec(
        XID, "incomplete", f"kernel log unreadable: {problem}.",
        threshold="a readable kernel log", remedy=KERNEL_LOG_REMEDY,
    )  # fmt: skip


def xid_errors(
    events: Sequence[XidEvent],
    gpus: Sequence[GpuReading],
    window_hours: float,
    now: datetime,
    source: str = "",
) -> Record:
    """Critical Xids inside the window fail; other Xids are listed but pass."""
    by_pci = {pci_key(g.pci_bus_id): g for g in gpus if g.pci_bus_id}
    critical = [e for e in events if e.critical]
    threshold = f"no critical Xid in the last {window_hours:g} h"
    if not critical:
        others = sorted({e.xid for e in events})
        buckets = "; ".join(f"{x}: {xid_bucket(x)}" for x in others)
        note = f" (non-critical Xids seen: {others}; {buckets})" if others else ""
        return rec(
            XID, "pass", f"no critical Xid in the last {window_hours:g} h{note}",
            value=others, threshold=threshold,
        )  # fmt: skip
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for e in critical:
        gpu = by_pci.get(pci_key(e.pci))
        where = f"GPU {gpu.label}" if gpu is not None else f"PCI {e.pci} (not enumerated by NVML)"
        groups.setdefault((where, e.xid), []).append(e)
    parts = []
    for (where, xid), evs in sorted(groups.items()):
        stamps = [e.when for e in evs if e.when is not None]
        last = f", last {max(stamps).isoformat(timespec='seconds')}" if stamps else ""
        parts.append(f"{where}: Xid {xid} x{len(evs)} ({evs[0].meaning}; {xid_bucket(xid)}){last}")
    remedies = list(dict.fromkeys(xid_remedy(e.xid) for e in critical))
    value = sorted({e.xid for e in critical})
    src = f" [{source}]" if source else ""
    return rec(
        XID, "fail", f"critical Xid(s) in the kernel log since {window_hours:g} h: "
        + "; ".join(parts) + f"{src}.",
        value=value, threshold=threshold, remedy=" | ".join(remedies),
        gpu=None,
    )  # fmt: skip
