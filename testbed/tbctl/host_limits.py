"""The host's kernel limits that a testbed of many nodes reaches first, raised for the run.

The nodes are namespaces of one kernel, so they share what a real node would have to itself:

- ``fs.inotify.max_user_instances`` (128 on Debian 12): every node boots its own systemd and
  they all run as the host's root (one user namespace), so they share root's per-user limit.
  A booted node's root processes hold 7 (counted on the 3-node testbed: systemd 5,
  systemd-logind 1, firewalld 1; polkitd's and dbus's count against their own users), so 18
  nodes and the host's gpg-agent took all 128 and the 19th node's systemd could not start
  (``make bench-scale SCALE_NODES=32``; in a container systemd exits 255 on that error
  instead of freezing).
- ``net.ipv4.neigh.default.gc_thresh1/2/3`` (128, 512, 1024): the ARP cache is one table for
  every network namespace, and its limits are set only in the host's. Each node that talks to
  every other holds an entry per peer, n x n in all: 32 nodes need 1024 entries, as many as
  gc_thresh3 allows, and at the 32-node point the kernel logged "neighbour: arp_cache:
  neighbor table overflow!" while verify's pre-check ran: 17 pairs' connections timed out
  (the SYN never left without an ARP entry), named BLOCKED. A real node holds only its own n
  entries (its own kernel); a flat L2 network of more than ~1000 nodes meets the same limit
  on every node (docs/scale.md).

``ensure`` raises each limit that is below what ``nodes`` need, saying so, and remembers the
value it found; ``restore`` (from ``make testbed-down``) puts those values back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .config import RUN_DIR
from .sh import say

#: root's inotify instances per node: 7 counted at boot, with room for what provisioning adds
INOTIFY_PER_NODE = 16
#: what the host's own root processes keep (2 here: gpg-agent; room for a desktop's more)
INOTIFY_HOST_RESERVE = 32
#: ARP entries the host itself keeps (its bridge address, its uplinks)
NEIGH_HOST_RESERVE = 256
PROC_SYS = Path("/proc/sys")
SAVED = RUN_DIR / "host-limits.json"


def _neigh_entries(nodes: int) -> int:
    """Every node's entry for every other node and for the host's bridge address, and the
    host's entry for every node."""
    return nodes * nodes + nodes


@dataclass(frozen=True)
class Limit:
    name: str  # the sysctl's name, dotted
    need: Callable[[int], int]  # what this many nodes need
    why: str

    def path(self, proc_sys: Path) -> Path:
        return proc_sys / self.name.replace(".", "/")


LIMITS = (
    Limit(
        "fs.inotify.max_user_instances",
        lambda n: n * INOTIFY_PER_NODE + INOTIFY_HOST_RESERVE,
        "root's processes in each node, systemd, logind and firewalld, hold ~7 of them",
    ),
    # the garbage collector starts above gc_thresh2 and gc_thresh3 is the hard cap: twice the
    # entries, so that stale entries of an earlier size never crowd out live ones
    Limit(
        "net.ipv4.neigh.default.gc_thresh2",
        lambda n: _neigh_entries(n) + NEIGH_HOST_RESERVE,
        "one ARP cache for every node's namespace: n x n entries",
    ),
    Limit(
        "net.ipv4.neigh.default.gc_thresh3",
        lambda n: 2 * _neigh_entries(n) + NEIGH_HOST_RESERVE,
        "one ARP cache for every node's namespace: n x n entries, the hard cap",
    ),
)


def needed(nodes: int) -> dict[str, int]:
    return {lim.name: lim.need(nodes) for lim in LIMITS}


def ensure(nodes: int, proc_sys: Path = PROC_SYS, saved: Path = SAVED) -> None:
    """Raise each of the host's limits that is below what ``nodes`` nodes need (never lower
    one); the value found first is kept in ``saved`` for ``restore``."""
    found: dict[str, int] = json.loads(saved.read_text()) if saved.exists() else {}
    for lim in LIMITS:
        path = lim.path(proc_sys)
        if not path.exists():
            continue
        current, want = int(path.read_text().split()[0]), lim.need(nodes)
        if current >= want:
            continue
        found.setdefault(lim.name, current)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(found, sort_keys=True) + "\n")
        say(f"host: {lim.name} {current} -> {want} for {nodes} nodes ({lim.why}; "
            "`make testbed-down` restores it)")  # fmt: skip
        path.write_text(f"{want}\n")


def restore(proc_sys: Path = PROC_SYS, saved: Path = SAVED) -> None:
    """Put back every limit ``ensure`` raised, as it found it."""
    if not saved.exists():
        return
    before: Mapping[str, int] = json.loads(saved.read_text())
    for name, value in sorted(before.items()):
        path = proc_sys / name.replace(".", "/")
        if path.exists() and int(path.read_text().split()[0]) != int(value):
            say(f"host: {name} back to {value}")
            path.write_text(f"{value}\n")
    saved.unlink()
