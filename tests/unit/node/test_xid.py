"""gpufleet.node.xid: kernel log parsing, window, critical list."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from gpufleet.node import xid

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("line", "when"),
    [
        pytest.param(
            "2026-11-30T11:30:00+0000 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, "
            "name=python, GPU has fallen off the bus.",
            datetime(2026, 11, 30, 11, 30, tzinfo=timezone.utc),
            id="journalctl-short-iso",
        ),
        pytest.param(
            "2026-11-30T12:30:00+01:00 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1",
            datetime(2026, 11, 30, 11, 30, tzinfo=timezone.utc),
            id="journalctl-colon-offset",
        ),
        pytest.param(
            "2026-11-30T11:30:00,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x",
            datetime(2026, 11, 30, 11, 30, 0, 123456, tzinfo=timezone.utc),
            id="dmesg-iso",
        ),
        pytest.param("[12345.678] NVRM: Xid (PCI:0000:3b:00): 79, pid=1", None, id="no-time"),
    ],
)
def test_parse_line_formats(line: str, when: datetime | None) -> None:
    ev = xid.parse_line(line)
    assert ev is not None
    assert ev.xid == 79
    assert ev.pci == "0000:3b:00"
    assert ev.when == when
    assert ev.critical
    assert ev.meaning == "GPU has fallen off the bus"


def test_non_xid_lines_are_ignored() -> None:
    assert xid.parse_line("2026-11-30T11:30:00+0000 h kernel: NVRM: loading NVIDIA UNIX") is None
    assert (
        xid.parse(["", "random", "NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"])[0].xid == 13
    )


def test_recent_window() -> None:
    events = [
        xid.XidEvent(79, "0000:3b:00", NOW - timedelta(hours=3), ""),
        xid.XidEvent(48, "0000:3b:00", NOW - timedelta(minutes=119), ""),
        xid.XidEvent(63, "0000:3b:00", None, ""),
    ]
    assert [e.xid for e in xid.recent(events, NOW, 2)] == [48, 63]
    assert [e.xid for e in xid.recent(events, NOW, 4)] == [79, 48, 63]


def test_critical_list_matches_the_reference() -> None:
    assert sorted(xid.CRITICAL_XIDS) == [
        48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120,
    ]  # fmt: skip
    assert not xid.XidEvent(13, "0000:3b:00", NOW, "").critical
    assert not xid.XidEvent(31, "0000:3b:00", NOW, "").critical
    for code in (48, 63, 64, 74, 79, 92, 119, 120):
        assert xid.XID_MEANING[code]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0000:3b:00", (0, 0x3B, 0)),
        ("00000000:3B:00.0", (0, 0x3B, 0)),
        ("3b:00.0", (0, 0x3B, 0)),
        ("0001:a1:01", (1, 0xA1, 1)),
        ("bogus", None),
    ],
)
def test_pci_key(text: str, key: tuple[int, int, int] | None) -> None:
    assert xid.pci_key(text) == key


def test_read_kernel_log_falls_back_to_dmesg(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def fake_run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        calls.append(cmd[0])
        if cmd[0] == "journalctl":
            return subprocess.CompletedProcess(cmd, 1, "", "No journal files were found.")
        return subprocess.CompletedProcess(cmd, 0, "2026-11-30T11:00:00,0+00:00 NVRM: x\n", "")

    monkeypatch.setattr(xid, "_run", fake_run)
    lines, source = xid.read_kernel_log(2)
    assert calls == ["journalctl", "dmesg"]
    assert source.startswith("dmesg")
    assert lines == ["2026-11-30T11:00:00,0+00:00 NVRM: x"]


def test_read_kernel_log_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(cmd: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        if cmd[0] == "dmesg":
            raise PermissionError("dmesg: read kernel buffer failed: Operation not permitted")
        return subprocess.CompletedProcess(cmd, 1, "", "Failed to access journal")

    monkeypatch.setattr(xid, "_run", fake_run)
    with pytest.raises(xid.KernelLogUnavailable, match="Operation not permitted"):
        xid.read_kernel_log(2)
