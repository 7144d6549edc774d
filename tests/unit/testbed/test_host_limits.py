"""The testbed raises the host's limits that many nodes share (inotify instances, the ARP
cache) and puts back what it found."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "testbed"))

from tbctl import host_limits

INOTIFY = "fs.inotify.max_user_instances"
GC2, GC3 = "net.ipv4.neigh.default.gc_thresh2", "net.ipv4.neigh.default.gc_thresh3"
DEBIAN = {INOTIFY: 128, GC2: 512, GC3: 1024}


def _proc(tmp: Path, values: dict[str, int]) -> Path:
    root = tmp / "sys"
    for name, value in values.items():
        path = root / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{value}\n")
    return root


def _read(root: Path) -> dict[str, int]:
    return {n: int((root / n.replace(".", "/")).read_text()) for n in DEBIAN}


def test_raises_only_what_is_short_and_restores_what_it_found(tmp_path: Path) -> None:
    root, saved = _proc(tmp_path, DEBIAN), tmp_path / "run" / "host-limits.json"
    host_limits.ensure(3, root, saved)  # Debian's defaults serve 3 nodes: left alone
    assert _read(root) == DEBIAN and not saved.exists()
    host_limits.ensure(12, root, saved)  # 12 x 16 + 32 = 224 inotify instances > 128
    got = _read(root)
    assert got[INOTIFY] == 224 and got[GC2] == 512 and got[GC3] == 1024, got
    assert json.loads(saved.read_text()) == {INOTIFY: 128}
    host_limits.ensure(32, root, saved)  # 32 x 33 = 1056 ARP entries: past gc_thresh3 (1024)
    got = _read(root)
    assert got[INOTIFY] == 544 and got[GC3] >= 2 * 1056 and got[GC2] >= 1056, got
    assert json.loads(saved.read_text()) == DEBIAN, "the values found first are kept"
    host_limits.restore(root, saved)
    assert _read(root) == DEBIAN and not saved.exists()
    host_limits.restore(root, saved)  # nothing saved: nothing to do
    assert _read(root) == DEBIAN


def test_never_lowers_a_higher_limit(tmp_path: Path) -> None:
    high = {INOTIFY: 8192, GC2: 8192, GC3: 16384}
    root, saved = _proc(tmp_path, high), tmp_path / "host-limits.json"
    host_limits.ensure(32, root, saved)
    assert _read(root) == high and not saved.exists()


def test_a_limit_the_kernel_lacks_is_skipped(tmp_path: Path) -> None:
    """A host without IPv4 neighbour settings (or a kernel that names them otherwise) still
    gets the inotify limit raised."""
    root, saved = _proc(tmp_path, {INOTIFY: 128}), tmp_path / "host-limits.json"
    host_limits.ensure(32, root, saved)
    assert int((root / "fs/inotify/max_user_instances").read_text()) == 544
    assert json.loads(saved.read_text()) == {INOTIFY: 128}
