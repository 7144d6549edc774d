"""Kernel log check: critical Xid events (see :mod:`gpufleet.node.xid`), each with NVIDIA's
resolution bucket.

NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
column "Resolution Bucket (Immediate Action)") files every Xid under an action:
``RESTART_APP`` (an application fault, the GPU stays usable), ``RESET_GPU``, ``RESTART_BM``
(reboot / power-cycle the machine), ``CONTACT_SUPPORT`` (hardware ticket). :data:`XID_BUCKETS`
keeps that action with the fault family gpufleet reports (application, memory, bus, nvlink,
gsp, engine), so a record says both what broke and what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpufleet.node.health._common import rec
from gpufleet.node.health.names import XID
from gpufleet.node.nvml import GpuReading
from gpufleet.node.xid import XidEvent, pci_key
from gpufleet.results import Record


@dataclass(frozen=True)
class XidBucket:
    """The family of an Xid and NVIDIA's immediate action for it."""

    family: str  # application, memory, bus, nvlink, gsp, engine, unknown
    action: str  # the catalog's immediate action: RESTART_APP, RESET_GPU, RESTART_BM, ...

    def __str__(self) -> str:
        return f"{self.family}, {self.action}"


_APP = XidBucket("application", "RESTART_APP")
_ENGINE = XidBucket("engine", "RESET_GPU")
#: Xid -> bucket (NVIDIA Xid catalog, immediate action); others: :data:`UNKNOWN_BUCKET`.
XID_BUCKETS: dict[int, XidBucket] = {
    13: _APP, 31: _APP, 43: _APP, 45: _APP,
    48: XidBucket("memory", "RESET_GPU"),  # double-bit ECC
    63: XidBucket("memory", "RESET_GPU"),  # retirement / remap pending: a reset applies it
    64: XidBucket("memory", "CONTACT_SUPPORT"),  # retirement / remap failed
    92: XidBucket("memory", "CONTACT_SUPPORT"),  # high single-bit ECC rate
    94: XidBucket("memory", "RESTART_APP"),  # contained ECC: only the app that hit it dies
    95: XidBucket("memory", "RESET_GPU"),  # uncontained ECC
    79: XidBucket("bus", "RESTART_BM"),  # fell off the bus: drain, reseat, power-cycle
    74: XidBucket("nvlink", "RESET_GPU"),
    119: XidBucket("gsp", "RESET_GPU"), 120: XidBucket("gsp", "RESET_GPU"),
    56: _ENGINE, 57: _ENGINE, 58: _ENGINE, 62: _ENGINE, 65: _ENGINE, 68: _ENGINE,
    69: _ENGINE, 73: _ENGINE, 80: _ENGINE, 81: _ENGINE,
}  # fmt: skip
UNKNOWN_BUCKET = XidBucket("unknown", "CONTACT_SUPPORT")
KERNEL_LOG_REMEDY = (
    "let gpufleet read the kernel log: run as root or a member of systemd-journal (journalctl), "
    "or allow dmesg (sysctl kernel.dmesg_restrict=0); or pass --kernel-log FILE"
)


def xid_bucket(xid: int) -> XidBucket:
    return XID_BUCKETS.get(xid, UNKNOWN_BUCKET)


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
    remedies = list(
        dict.fromkeys(f"Xid {e.xid} ({xid_bucket(e.xid).action}): {e.remedy}" for e in critical)
    )
    value = sorted({e.xid for e in critical})
    src = f" [{source}]" if source else ""
    return rec(
        XID, "fail", f"critical Xid(s) in the kernel log since {window_hours:g} h: "
        + "; ".join(parts) + f"{src}.",
        value=value, threshold=threshold, remedy=" | ".join(remedies),
        gpu=None,
    )  # fmt: skip
