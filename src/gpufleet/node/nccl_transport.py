"""Which transport NCCL used, from its ``NCCL_DEBUG=INFO`` / ``NCCL_DEBUG_SUBSYS=INIT,NET`` log.

NCCL picks InfiniBand verbs (``Using network IB``) when libibverbs and an active HCA are
present and falls back to TCP sockets (``Using network Socket``) otherwise, silently unless
NCCL_DEBUG=INFO is set. The init lines name the devices (``NET/IB : Using [0]mlx5_0:1/IB``
or ``NET/Socket : Using [0]eth0:10.0.0.1<0>``), GPUDirect RDMA per HCA (``NET/IB : GPU
Direct RDMA Enabled for HCA 0 'mlx5_0'`` / ``... Disabled ... (no module)``) and each
channel's path (``via NET/IB/0/GDRDMA``, ``via NET/Socket/0``, ``via P2P/IPC``, ``via
SHM/direct/direct``). Sources: NCCL environment variables and troubleshooting,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html and
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html; the
messages are in NVIDIA/nccl src/transport/net_ib.cc and src/transport.cc.

:func:`parse` groups the lines by process (the ``host:pid:tid`` prefix) and names each
process's rank from its ``comm ... rank N nRanks M`` line; :func:`nccl_transport` turns the
ranks into the ``nccl_transport`` record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.node import ib_ports as ibports
from gpufleet.node.health._common import rec as make_record
from gpufleet.results import Record

NCCL_TRANSPORT = "nccl_transport"
#: NCCL_DEBUG_FILE pattern (%h host, %p pid): one log per rank process.
LOG_PATTERN = "nccl.%h.%p.log"
LOG_GLOB = "nccl.*.log"

SOCKET_REMEDY = (
    "NCCL fell back to TCP sockets although active InfiniBand/RoCE ports exist: install "
    "rdma-core/libibverbs on every node, check that NCCL_IB_DISABLE is unset and that "
    "NCCL_IB_HCA names active ports (`ibstat`), and rerun with NCCL_DEBUG=INFO"
)
GDR_REMEDY = (
    "load nvidia-peermem on the nodes of these ranks (`modprobe nvidia-peermem`, persisted "
    "in /etc/modules-load.d) so that the HCA reads GPU memory directly"
)

_PREFIX = re.compile(
    r"^\s*(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+)\s+\[(?P<dev>\d+)\]\s+NCCL INFO\s+(?P<msg>.*)$"
)
_COMM = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) n[Rr]anks (\d+)")
_NETWORK = re.compile(r"^Using network (\S+)")
_IB_USING = re.compile(r"^NET/IB : Using (.*?)(?:;|$)")
_IB_DEV = re.compile(r"\[\d+\](\S+?)/(IB|RoCE)\b")
_SOCKET_USING = re.compile(r"^NET/Socket : Using (.*)$")
_GDR = re.compile(r"GPU Direct RDMA (?:\(DMABUF\) )?(Enabled|enabled|Disabled|disabled) for HCA")
_CHANNEL = re.compile(r"^Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\](?: \[\w+\])? via (\S+)")


@dataclass
class RankTransport:
    """What one NCCL process (one rank) reported."""

    host: str
    pid: int
    rank: int | None = None
    nranks: int | None = None
    network: str | None = None  # "IB", "Socket", or a plugin's name
    ib_devices: list[str] = field(default_factory=list)  # "mlx5_0:1/IB"
    socket_devices: list[str] = field(default_factory=list)
    gdr_hcas: dict[str, bool] = field(default_factory=dict)  # per "Enabled/Disabled" line
    paths: set[str] = field(default_factory=set)  # "NET/IB/0/GDRDMA", "P2P/IPC", ...

    @property
    def net_paths(self) -> list[str]:
        return sorted(p for p in self.paths if p.startswith("NET/"))

    @property
    def used_sockets(self) -> bool:
        return any(p.startswith("NET/Socket") for p in self.paths) or (
            self.network == "Socket" and not self.net_paths
        )

    @property
    def used_ib(self) -> bool:
        return any(p.startswith("NET/IB") for p in self.paths) or (
            self.network == "IB" and not self.net_paths
        )

    @property
    def gdr(self) -> bool | None:
        """GPUDirect RDMA on this rank's IB channels; None without IB traffic."""
        ib = [p for p in self.paths if p.startswith("NET/IB")]
        if ib:
            return all(p.endswith("/GDRDMA") for p in ib)
        if self.network == "IB" and self.gdr_hcas:
            return all(self.gdr_hcas.values())
        return None

    @property
    def transport(self) -> str:
        if self.used_sockets:
            return "Socket"
        if self.used_ib:
            return "IB+GDR" if self.gdr else "IB"
        if self.net_paths:
            return self.net_paths[0].split("/")[1]
        if any(p.startswith(("P2P", "SHM")) for p in self.paths):
            return "intra-node (" + ", ".join(sorted({p.split("/")[0] for p in self.paths})) + ")"
        return self.network or "unknown"

    def to_dict(self) -> dict[str, object]:
        return {
            "rank": self.rank,
            "host": self.host,
            "transport": self.transport,
            "network": self.network,
            "gdr": self.gdr,
            "devices": self.ib_devices or self.socket_devices,
            "paths": sorted(self.paths),
        }


def parse(lines: Iterable[str]) -> list[RankTransport]:
    """Ranks from NCCL INFO lines (one log or several concatenated), in rank order."""
    procs: dict[tuple[str, int], RankTransport] = {}
    for line in lines:
        m = _PREFIX.match(line)
        if m is None:
            continue
        key = (m["host"], int(m["pid"]))
        rt = procs.setdefault(key, RankTransport(host=key[0], pid=key[1]))
        msg = m["msg"].strip()
        if (c := _COMM.search(msg)) is not None and rt.rank is None:
            rt.rank, rt.nranks = int(c[1]), int(c[2])
        elif (n := _NETWORK.match(msg)) is not None:
            rt.network = n[1]
        elif (u := _IB_USING.match(msg)) is not None:
            rt.ib_devices = [f"{d}/{kind}" for d, kind in _IB_DEV.findall(u[1])]
        elif (s := _SOCKET_USING.match(msg)) is not None:
            rt.socket_devices = re.findall(r"\[\d+\](\S+)", s[1])
        elif (g := _GDR.search(msg)) is not None:
            hca = re.search(r"'([^']+)'", msg)
            rt.gdr_hcas[hca[1] if hca else msg] = g[1].lower() == "enabled"
        elif (ch := _CHANNEL.match(msg)) is not None:
            rt.paths.add(ch[1])
    return sorted(procs.values(), key=lambda r: (r.rank is None, r.rank or 0, r.host, r.pid))


def nccl_transport(
    ranks: Sequence[RankTransport],
    active_ports: Mapping[str, Sequence[str]] | None = None,
    backend: str = "nccl",
) -> Record:
    """The transport each rank used; fail on sockets where active IB/RoCE ports exist.

    ``active_ports`` maps a node (the host name in the NCCL prefix) to its ACTIVE/LinkUp
    InfiniBand/RoCE ports (:func:`gpufleet.node.ib_ports.active_ports`); IB without GDR warns.
    """
    if backend != "nccl":
        return make_record(
            NCCL_TRANSPORT, "skip", f"backend {backend}: NCCL not used, no transport to check"
        )
    if not ranks:
        return make_record(
            NCCL_TRANSPORT, "skip", "no NCCL INFO lines in the logs (NCCL_DEBUG=INFO not set?)"
        )
    ports = {h: list(p) for h, p in (active_ports or {}).items() if p}
    value = [r.to_dict() for r in ranks]
    label = ", ".join(
        f"rank {r.rank if r.rank is not None else '?'} ({r.host})" for r in ranks if r.used_sockets
    )
    fell_back = [r for r in ranks if r.used_sockets and ports.get(r.host)]
    if fell_back:
        where = "; ".join(f"{h}: {', '.join(p)}" for h, p in sorted(ports.items()))
        return make_record(
            NCCL_TRANSPORT, "fail",
            f"NCCL used TCP sockets on {label} although active IB/RoCE ports exist ({where}).",
            value=value, threshold="IB where active IB/RoCE ports exist", remedy=SOCKET_REMEDY,
        )  # fmt: skip
    no_gdr = [r for r in ranks if r.used_ib and r.gdr is False]
    if no_gdr:
        names = ", ".join(f"rank {r.rank} ({r.host})" for r in no_gdr)
        return make_record(
            NCCL_TRANSPORT, "warn",
            f"NCCL used InfiniBand without GPUDirect RDMA on {names}: traffic is staged "
            "through host memory.",
            value=value, threshold="IB with GDR", remedy=GDR_REMEDY,
        )  # fmt: skip
    summary = sorted({r.transport for r in ranks})
    gdr = [r.rank for r in ranks if r.gdr]
    extra = f"; GPUDirect RDMA on ranks {gdr}" if gdr else ""
    return make_record(
        NCCL_TRANSPORT, "pass",
        f"{len(ranks)} rank(s) used {', '.join(summary)}{extra}.",
        value=value, threshold="IB where active IB/RoCE ports exist",
    )  # fmt: skip


def debug_env(log_dir: Path) -> dict[str, str]:
    """The environment that makes NCCL write its transport choice, one file per rank."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(log_dir / LOG_PATTERN),
    }


def node_record(
    log_dir: Path, backend: str, ib_root: Path = Path("/sys/class/infiniband")
) -> Record:
    """``nccl_transport`` for the ranks of this node: their logs in ``log_dir`` against
    this node's active InfiniBand/RoCE ports."""
    if backend != "nccl":
        return nccl_transport([], None, backend)
    lines: list[str] = []
    for path in sorted(log_dir.glob(LOG_GLOB)):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    ranks = parse(lines)
    active = ibports.active_ports(ibports.ports_from_raw(ibports.read_ib_sysfs(ib_root)))
    return nccl_transport(ranks, {r.host: active for r in ranks})
