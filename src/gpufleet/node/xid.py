"""NVIDIA Xid events from the kernel log.

The driver logs GPU faults as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., <text>``. This
module parses such lines with their timestamp (``journalctl -o short-iso`` or
``dmesg --time-format iso``), keeps those inside a recent window and flags the critical
ones. The critical list and the 2-hour default window are those of Azure's
azurehpc-health-checks ``check_gpu_xid`` (customTests/*.nhc); meanings follow NVIDIA's Xid
catalogue (docs.nvidia.com/deploy/xid-errors).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

#: azurehpc-health-checks check_gpu_xid default window (hours).
DEFAULT_WINDOW_HOURS = 2.0

#: Xids that fail the node (azurehpc-health-checks check_gpu_xid).
CRITICAL_XIDS: frozenset[int] = frozenset(
    {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
)

#: What an Xid means (NVIDIA Xid catalogue), for the failure message.
XID_MEANING: dict[int, str] = {
    13: "graphics engine exception (usually an application bug)",
    31: "GPU memory page fault (usually an application bug)",
    43: "GPU stopped processing (application fault)",
    45: "preemptive cleanup after a previous error",
    48: "double-bit ECC error (DBE)",
    56: "display engine error",
    57: "error programming the video memory interface",
    58: "unstable video memory interface",
    62: "internal micro-controller halt",
    63: "ECC page retirement / row remapping recorded (reset the GPU to apply)",
    64: "ECC page retirement / row remapping failure",
    65: "video processor exception",
    68: "video decoder (NVDEC) exception",
    69: "graphics engine class error",
    73: "video encoder (NVENC) error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    80: "corrupted data sent to the GPU",
    81: "VGA subsystem error",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

#: Fix per Xid, after NVIDIA's immediate action (gpufleet.node.health.kernel_log.xid_remedy);
#: the rest get kernel_log.RECUR_REMEDY.
XID_REMEDY: dict[int, str] = {
    79: "drain the node before the restart; afterwards check riser, seating, PCIe AER errors "
    "and power; RMA if it recurs",
    48: "the reset retires the page / applies the row remap; RMA if DBEs recur",
    63: "the retirement/remap is recorded; it takes effect at the next GPU reset "
    "(nvidia-smi -r) or reboot, so do one when convenient (nvidia-smi -q -d ROW_REMAPPER)",
    64: "drain the node before the reset; the retirement/remap failed: open a hardware "
    "ticket (RMA)",
    74: "check NVLink/NVSwitch (nvidia-smi nvlink -s, Fabric Manager); RMA if it recurs",
    92: "watch the corrected-error rate (nvidia-smi -q -d ECC); RMA if it keeps rising",
    119: "update the driver; on proprietary modules NVreg_EnableGpuFirmware=0 disables GSP",
    120: "update the driver; on proprietary modules NVreg_EnableGpuFirmware=0 disables GSP",
}

_TS_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:[.,](?P<frac>\d+))?(?P<tz>Z|[+-]\d{2}:?\d{2})?"
)
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
    r"(?:\.[0-7])?\): (?P<xid>\d+),?(?P<rest>.*)$"
)


@dataclass(frozen=True)
class XidEvent:
    xid: int
    pci: str  # as logged, e.g. "0000:3b:00"
    when: datetime | None  # None when the line carries no parseable timestamp
    text: str  # the rest of the line (pid, process, description)

    @property
    def critical(self) -> bool:
        return self.xid in CRITICAL_XIDS

    @property
    def meaning(self) -> str:
        return XID_MEANING.get(self.xid, "see NVIDIA's Xid catalogue")


class KernelLogUnavailable(Exception):
    """Neither journalctl nor dmesg could be read."""


def pci_key(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of "0000:3b:00", "00000000:3B:00.0" or "3b:00.0"."""
    m = re.match(
        r"^(?:(?P<dom>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})",
        bus_id.strip(),
    )
    if not m:
        return None
    return (int(m["dom"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16))


def _parse_ts(line: str) -> datetime | None:
    m = _TS_RE.match(line)
    if not m:
        return None
    frac = (m["frac"] or "0")[:6].ljust(6, "0")
    tz = m["tz"]
    if tz is None or tz == "Z":
        offset = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    return datetime.fromisoformat(f"{m['date']}T{m['time']}.{frac}").replace(tzinfo=offset)


def parse_line(line: str) -> XidEvent | None:
    """An XidEvent for an ``NVRM: Xid`` line, else None."""
    m = _XID_RE.search(line.rstrip("\n"))
    if not m:
        return None
    return XidEvent(
        xid=int(m["xid"]), pci=m["pci"].lower(), when=_parse_ts(line), text=m["rest"].strip()
    )


def parse(lines: Iterable[str]) -> list[XidEvent]:
    return [e for e in (parse_line(line) for line in lines) if e is not None]


def recent(
    events: Iterable[XidEvent], now: datetime, window_hours: float = DEFAULT_WINDOW_HOURS
) -> list[XidEvent]:
    """Events inside [now - window, now]. Events without a timestamp count as recent."""
    start = now - timedelta(hours=window_hours)
    return [e for e in events if e.when is None or e.when >= start]


def _run(cmd: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)


def read_kernel_log(window_hours: float, timeout_s: float = 20.0) -> tuple[list[str], str]:
    """Kernel log lines of the last ``window_hours`` (coarse; filter with :func:`recent`).

    journalctl first (``_TRANSPORT=kernel`` covers earlier boots when the journal is
    persistent, unlike ``-k`` which is the current boot only), then ``dmesg``. Returns
    (lines, source command). Raises :class:`KernelLogUnavailable`.
    """
    minutes = int(window_hours * 60) + 5
    attempts: list[tuple[str, ...]] = [
        (
            "journalctl", "_TRANSPORT=kernel", "-o", "short-iso", "--no-pager", "-q",
            "--since", f"{minutes} min ago",
        ),
        ("dmesg", "--time-format", "iso"),
    ]  # fmt: skip
    problems: list[str] = []
    for cmd in attempts:
        try:
            proc = _run(cmd, timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{cmd[0]}: {exc}")
            continue
        if proc.returncode != 0 or "No journal files" in proc.stderr:
            problems.append(f"{cmd[0]}: rc={proc.returncode} {proc.stderr.strip()[:200]}")
            continue
        if cmd[0] == "journalctl" and not proc.stdout.strip():
            # an empty answer may also mean "no journal here" (containers): ask dmesg too
            problems.append("journalctl: no kernel messages in the window")
            continue
        return proc.stdout.splitlines(), " ".join(cmd)
    if problems == ["journalctl: no kernel messages in the window"]:
        return [], "journalctl (empty)"
    raise KernelLogUnavailable("; ".join(problems))
