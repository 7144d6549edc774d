"""Kernel log check: critical Xid events (see :mod:`gpufleet.node.xid`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpufleet.node.health._common import rec
from gpufleet.node.health.names import XID
from gpufleet.node.nvml import GpuReading
from gpufleet.node.xid import XidEvent, pci_key
from gpufleet.results import Record


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
        note = f" (non-critical Xids seen: {others})" if others else ""
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
        parts.append(f"{where}: Xid {xid} x{len(evs)} ({evs[0].meaning}){last}")
    remedies = list(dict.fromkeys(e.remedy for e in critical))
    value = sorted({e.xid for e in critical})
    src = f" [{source}]" if source else ""
    return rec(
        XID, "fail", f"critical Xid(s) in the kernel log since {window_hours:g} h: "
        + "; ".join(parts) + f"{src}.",
        value=value, threshold=threshold, remedy=" | ".join(remedies),
        gpu=None,
    )  # fmt: skip
