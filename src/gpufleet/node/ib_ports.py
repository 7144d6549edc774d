"""InfiniBand / RoCE ports from sysfs, and GPUDirect RDMA (``nvidia-peermem``).

NCCL uses its InfiniBand verbs transport when an active HCA port is present and falls back
to TCP sockets otherwise; GPUDirect RDMA (NIC reads and writes GPU memory directly) needs
the ``nvidia-peermem`` kernel module, without it NCCL stages through host memory at a
fraction of the bandwidth. Each port's facts are in
``/sys/class/infiniband/<hca>/ports/<n>/{state,phys_state,link_layer,rate}``.

Loaded is not enough: the module must also have registered with the peer-memory API of the
``ib_core`` in use (MLNX_OFED/DOCA-OFED's), which makes
``/sys/kernel/mm/memory_peers/nv_mem/version`` (or ``nv_mem_nc``) appear. A module built
against another ``ib_core`` loads and registers nothing, and GPUDirect RDMA is silently off.
:func:`gpudirect_rdma` judges both. Sources:

* NCCL troubleshooting, networking (NIC-level diagnostics),
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
* GPUDirect RDMA, "Using nvidia-peermem", https://docs.nvidia.com/cuda/gpudirect-rdma/index.html
* half the bandwidth without peer memory, https://github.com/NVIDIA/nccl/issues/214
* loaded but not registered, NCCL "GPU Direct RDMA Disabled",
  https://github.com/NVIDIA/nccl/issues/1939; the memory_peers paths are the ones NCCL's
  probe reads (``ncclIbGdrSupport``, src/transport/net_ib.cc, https://github.com/NVIDIA/nccl)

Readers touch sysfs and take their root (tests pass a fake tree); the verdicts
(:func:`ib_ports`, :func:`gpudirect_rdma`) are pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.node.health._common import rec as make_record
from gpufleet.results import Record

IB_PORTS = "ib_ports"
GPUDIRECT_RDMA = "gpudirect_rdma"

PORT_FILES = ("state", "phys_state", "link_layer", "rate")
STATE_ACTIVE = "ACTIVE"
PHYS_LINK_UP = "LinkUp"
#: Kernel modules that give NCCL GPUDirect RDMA (nvidia-peermem since R470; the older
#: out-of-tree module was nv_peer_mem).
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
#: Peer-memory clients nvidia-peermem registers with ib_core (nv_mem; nv_mem_nc on some
#: builds): /sys/kernel/mm/memory_peers/<client>/version exists once it has.
MEMORY_PEERS = ("nv_mem", "nv_mem_nc")
MEMORY_PEERS_ROOT = Path("/sys/kernel/mm/memory_peers")

PORT_REMEDY = (
    "check the cable and the switch port (`ibstat`, `iblinkinfo`); a port in Polling has "
    "no link partner, Down/Init without a subnet manager stays inactive (start opensm or "
    "check the fabric's SM); a lower rate than expected points at a cable or transceiver: "
    "reseat or replace it"
)
PEERMEM_REMEDY = (
    "`modprobe nvidia-peermem` and persist it: `echo nvidia-peermem > "
    "/etc/modules-load.d/nvidia-peermem.conf` (`make provision` does, role infiniband; the "
    "module ships with the driver since R470; it must be rebuilt with the driver after an "
    "rdma-core/OFED change)"
)
PEERMEM_REGISTER_REMEDY = (
    "nvidia-peermem was built without the peer-memory API of the ib_core in use: reinstall "
    "(rebuild) the NVIDIA driver after MLNX_OFED/DOCA-OFED so nvidia-peermem links against "
    "its ib_core, `rmmod nvidia_peermem; modprobe nvidia-peermem`, and check `dmesg | grep "
    "peermem`"
)
PEERS_UNKNOWN_REMEDY = (
    "record the node again with `gpufleet nvml record --full` (it records "
    "/sys/kernel/mm/memory_peers), or run the check on the node itself"
)


@dataclass(frozen=True)
class IbPort:
    hca: str
    port: str
    state: str  # "ACTIVE", "DOWN", "INIT", ...
    phys_state: str  # "LinkUp", "Polling", "Disabled", ...
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    rate_gbps: float | None
    rate_text: str

    @property
    def name(self) -> str:
        return f"{self.hca}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == STATE_ACTIVE and self.phys_state == PHYS_LINK_UP


def _after_colon(text: str) -> str:
    """ "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LinkUp"."""
    return text.split(":", 1)[-1].strip()


def parse_rate(text: str) -> float | None:
    """ "400 Gb/sec (4X NDR)" -> 400.0."""
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec", text)
    return float(m[1]) if m else None


def read_ib_sysfs(
    root: Path = Path("/sys/class/infiniband"),
) -> dict[str, dict[str, dict[str, str]]]:
    """``{hca: {port: {state, phys_state, link_layer, rate}}}``, raw; {} when absent."""
    found: dict[str, dict[str, dict[str, str]]] = {}
    if not root.is_dir():
        return found
    for hca in sorted(root.iterdir()):
        ports_dir = hca / "ports"
        if not ports_dir.is_dir():
            continue
        for port in sorted(ports_dir.iterdir(), key=lambda p: p.name):
            entry = {}
            for name in PORT_FILES:
                try:
                    entry[name] = (port / name).read_text(encoding="utf-8").strip()
                except OSError:
                    entry[name] = ""
            found.setdefault(hca.name, {})[port.name] = entry
    return found


def read_memory_peers(root: Path = MEMORY_PEERS_ROOT) -> tuple[str, ...]:
    """The peer-memory clients of :data:`MEMORY_PEERS` registered with ib_core (their
    ``<root>/<client>/version`` exists); () when none is, or the directory is absent (an
    ib_core without the peer-memory API)."""
    return tuple(c for c in MEMORY_PEERS if (root / c / "version").is_file())


def ports_from_raw(raw: Mapping[str, Mapping[str, Mapping[str, str]]]) -> list[IbPort]:
    return [
        IbPort(
            hca=hca,
            port=str(port),
            state=_after_colon(files.get("state", "")),
            phys_state=_after_colon(files.get("phys_state", "")),
            link_layer=files.get("link_layer", "").strip(),
            rate_gbps=parse_rate(files.get("rate", "")),
            rate_text=files.get("rate", "").strip(),
        )
        for hca, ports in sorted(raw.items())
        for port, files in sorted(ports.items())
    ]


def active_ports(ports: Sequence[IbPort]) -> list[str]:
    """Names (``mlx5_0:1``) of the ports NCCL could use (ACTIVE and LinkUp)."""
    return [p.name for p in ports if p.active]


def raw_from_listing(text: str) -> dict[str, dict[str, dict[str, str]]]:
    """The provisioning roles' read of sysfs -> the raw form of :func:`read_ib_sysfs`.

    One line per file: ``<hca>/ports/<n>/<file><TAB><content>`` (paths relative to the
    sysfs root, as ``grep -r . --include=...`` or the roles' shell loop prints them).
    """
    found: dict[str, dict[str, dict[str, str]]] = {}
    for line in text.splitlines():
        path, sep, content = line.partition("\t")
        parts = path.strip().strip("/").split("/")
        if not sep or len(parts) != 4 or parts[1] != "ports" or parts[3] not in PORT_FILES:
            continue
        hca, _, port, name = parts
        found.setdefault(hca, {}).setdefault(port, dict.fromkeys(PORT_FILES, ""))[name] = (
            content.strip()
        )
    return found


def nccl_ib_hca(
    raw: Mapping[str, Mapping[str, Mapping[str, str]]], link_layer: str = "InfiniBand"
) -> list[str]:
    """Ports for ``NCCL_IB_HCA``: the ACTIVE/LinkUp ports of ``link_layer`` (RoCE front-end
    ports stay out unless named), sorted: ``["mlx5_0:1", "mlx5_1:1"]``."""
    return sorted(p.name for p in ports_from_raw(raw) if p.active and p.link_layer == link_layer)


def ib_ports(
    ports: Sequence[IbPort],
    expected: Sequence[str] | None = None,
    min_rate_gbps: float | None = None,
    link_layer: str | None = None,
) -> Record:
    """Each expected port ACTIVE + LinkUp, of the expected link layer, at the expected rate.

    ``expected`` names ports as ``hca:port``; by default every InfiniBand port is expected
    (RoCE ports are checked when named). Without ``min_rate_gbps`` the expected rate is the
    highest one among the expected ports, so one port trained at a lower rate than its
    siblings (a downshift) fails.
    """
    by_name = {p.name: p for p in ports}
    default = [p.name for p in ports if p.link_layer == "InfiniBand"]
    names = list(expected) if expected else default
    if not names:
        why = (
            "no InfiniBand/RoCE HCA (/sys/class/infiniband is empty or absent)"
            if not ports
            else f"no InfiniBand port among {', '.join(p.name for p in ports)} "
            "(RoCE ports are checked when named in ib_ports)"
        )
        return make_record(IB_PORTS, "skip", why)
    rates = [r for n in names if n in by_name and (r := by_name[n].rate_gbps)]
    want_rate = min_rate_gbps if min_rate_gbps is not None else max(rates, default=None)
    bad: list[str] = []
    value: dict[str, object] = {}
    for name in names:
        p = by_name.get(name)
        if p is None:
            bad.append(f"{name} missing")
            value[name] = None
            continue
        value[name] = {
            "state": p.state,
            "phys_state": p.phys_state,
            "link_layer": p.link_layer,
            "rate": p.rate_text,
        }
        if not p.active:
            bad.append(f"{name} {p.state}/{p.phys_state}")
        if link_layer and p.link_layer != link_layer:
            bad.append(f"{name} link layer {p.link_layer}, expected {link_layer}")
        if p.active and want_rate and (p.rate_gbps or 0) < want_rate:
            bad.append(f"{name} rate {p.rate_text or 'unknown'} < {want_rate:g} Gb/sec")
    threshold = "ACTIVE/LinkUp" + (f", >= {want_rate:g} Gb/sec" if want_rate else "")
    if link_layer:
        threshold += f", {link_layer}"
    if bad:
        return make_record(
            IB_PORTS, "fail", f"{len(bad)} port problem(s): " + "; ".join(bad) + ".",
            value=value, threshold=threshold, remedy=PORT_REMEDY,
        )  # fmt: skip
    return make_record(
        IB_PORTS, "pass", f"{len(names)} port(s) {threshold}: {', '.join(names)}.",
        value=value, threshold=threshold,
    )  # fmt: skip


def gpudirect_rdma(
    ports: Sequence[IbPort],
    gpus: int | None,
    modules: Sequence[str],
    registered: Sequence[str] | None,
) -> Record:
    """``nvidia-peermem`` loaded and registered with ib_core's peer-memory API where GPUs and
    an active RDMA port are present.

    ``modules``: the loaded kernel modules; ``registered``: the peer-memory clients of
    :func:`read_memory_peers`, None when nobody looked (a recording made without the
    ``memory_peers`` section): loaded is then all that can be told, and the verdict is
    incomplete rather than a guess.
    """
    threshold = "nvidia_peermem loaded and registered (memory_peers/nv_mem)"
    if not ports:
        return make_record(GPUDIRECT_RDMA, "skip", "no InfiniBand/RoCE HCA: no GPUDirect RDMA path")
    if not gpus:
        return make_record(GPUDIRECT_RDMA, "skip", "no NVIDIA GPU: no GPUDirect RDMA path")
    usable = active_ports(ports)
    if not usable:
        return make_record(
            GPUDIRECT_RDMA, "skip",
            f"no active InfiniBand/RoCE port ({', '.join(p.name for p in ports)} inactive; "
            "see ib_ports)",
        )  # fmt: skip
    where = f"{gpus} GPU(s) and active RDMA port(s) {', '.join(usable)}"
    loaded = [m for m in PEERMEM_MODULES if m in modules]
    value = {"modules": loaded, "registered": None if registered is None else list(registered)}
    if not loaded:
        return make_record(
            GPUDIRECT_RDMA, "fail",
            f"{where}, but nvidia-peermem is not loaded: NCCL runs over IB without GPUDirect "
            "RDMA, staging through host memory.",
            value=value, threshold=threshold, remedy=PEERMEM_REMEDY,
        )  # fmt: skip
    paths = " or ".join(f"{MEMORY_PEERS_ROOT}/{c}/version" for c in MEMORY_PEERS)
    if registered is None:
        return make_record(
            GPUDIRECT_RDMA, "incomplete",
            f"{loaded[0]} loaded ({where}), but whether it registered with the peer-memory "
            f"API is unknown: the recording has no memory_peers section ({paths}).",
            value=value, threshold=threshold, remedy=PEERS_UNKNOWN_REMEDY,
        )  # fmt: skip
    if not registered:
        return make_record(
            GPUDIRECT_RDMA, "fail",
            f"{loaded[0]} is loaded but not registered with the peer-memory API ({paths} "
            f"absent), {where}: GPUDirect RDMA is off (NCCL: GPU Direct RDMA Disabled).",
            value=value, threshold=threshold, remedy=PEERMEM_REGISTER_REMEDY,
        )  # fmt: skip
    return make_record(
        GPUDIRECT_RDMA, "pass",
        f"{loaded[0]} loaded and registered as {', '.join(registered)}; {where}.",
        value=value, threshold=threshold,
    )  # fmt: skip
