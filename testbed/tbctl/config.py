"""Constants and the node/release model of the testbed (pure, no side effects)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

TESTBED_DIR = Path(__file__).resolve().parents[1]  # <repo>/testbed
REPO_DIR = TESTBED_DIR.parent

# Everything the testbed creates lives under STATE_DIR (git-ignored):
#   cache/  kept by `make testbed-down` (base rootfs, downloaded wheels); removed by testbed-clean
#   run/    removed by `make testbed-down` (nodes, keys, mirror, pid files, logs)
STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", TESTBED_DIR / ".state"))
CACHE_DIR = STATE_DIR / "cache"
RUN_DIR = STATE_DIR / "run"
INVENTORY_DIR = Path(os.environ.get("TESTBED_INVENTORY_DIR", TESTBED_DIR / "inventory"))

# Names of kernel objects: every one starts with PREFIX so that `testbed-down` and the tests
# can find exactly ours and nothing else.
PREFIX = "gftb"
BRIDGE = f"{PREFIX}-br0"
SUBNET = ipaddress.ip_network(os.environ.get("TESTBED_SUBNET", "10.213.0.0/24"))
BRIDGE_ADDRESS = str(next(SUBNET.hosts()))  # .1, in the root namespace
NODE_HOST_OFFSET = 10  # node1 -> .11, node2 -> .12, ...
HTTP_PORT = int(os.environ.get("TESTBED_HTTP_PORT", "8213"))
DEFAULT_NODES = 3
MAX_NODES = 32

#: node_exporter's textfile directory in the nodes (MONITOR=1, tbctl.monitor): Debian's
#: package default, given to gpufleet as gpufleet_health_textfile_dir in the inventory.
NODE_TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("TESTBED_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Packages of the base root filesystem. Changing this list rebuilds the cached base.
ROOTFS_PACKAGES = (
    "python3",  # 3.11 on bookworm: /usr/bin/python3.11
    "python3-venv",
    "python3-dnf",
    "dnf",
    "dnf-plugins-core",
    "rpm",
    "openssh-server",
    "systemd",
    "dbus",
    "firewalld",
    "nftables",
    "python3-nftables",
    "iproute2",
    "netbase",  # /etc/protocols, /etc/services: firewalld refuses to start without them
    "iputils-ping",
    "procps",
    "sudo",
    "gnupg",
    "pciutils",
    "kmod",
    "ca-certificates",
    "less",
    # the site's scheduler (started only with `testbed-up --slurm`, testbed/tbctl/slurm.py)
    "munge",
    "slurmd",
    "slurmctld",
    "slurm-client",
)


@dataclass(frozen=True)
class ElRelease:
    """An EL release a node pretends to be (through /etc/os-release and friends)."""

    key: str  # short name used on the command line: alma8, rocky9, centos10
    distro_id: str  # os-release ID
    name: str  # os-release NAME
    version_id: str  # os-release VERSION_ID
    pretty_name: str
    release_line: str  # /etc/redhat-release
    release_file: str  # the distribution's own file (/etc/almalinux-release, ...)
    id_like: str
    cpe: str
    home_url: str
    platform_id: str
    version_codename: str = ""

    @property
    def major(self) -> int:
        return int(self.version_id.split(".")[0])


def _release(key: str, distro_id: str, name: str, version_id: str, codename: str,
             id_like: str, cpe: str, home_url: str) -> ElRelease:  # fmt: skip
    """One ElRelease; the strings derived alike for every EL distribution are derived here."""
    return ElRelease(
        key=key,
        distro_id=distro_id,
        name=name,
        version_id=version_id,
        pretty_name=f"{name} {version_id} ({codename})",
        release_line=f"{name} release {version_id} ({codename})",
        release_file=f"/etc/{distro_id}-release",
        id_like=id_like,
        cpe=cpe,
        home_url=home_url,
        platform_id=f"platform:el{version_id.split('.', maxsplit=1)[0]}",
    )


# fmt: off
RELEASES: dict[str, ElRelease] = {
    r.key: r
    for r in (
        _release("alma8", "almalinux", "AlmaLinux", "8.10", "Cerulean Leopard",
                 "rhel centos fedora", "cpe:/o:almalinux:almalinux:8::baseos",
                 "https://almalinux.org/"),
        _release("rocky9", "rocky", "Rocky Linux", "9.6", "Blue Onyx", "rhel centos fedora",
                 "cpe:/o:rocky:rocky:9::baseos", "https://rockylinux.org/"),
        _release("centos10", "centos", "CentOS Stream", "10", "Coughlan", "rhel fedora",
                 "cpe:/o:centos:centos:10", "https://centos.org/"),
    )
}
# fmt: on
DEFAULT_MIX = ("alma8", "rocky9", "centos10")


@dataclass(frozen=True)
class Node:
    index: int  # 1-based
    release: ElRelease
    hgx: str = ""  # TESTBED_HGX pose ("h100", "b200"; "" = none), see render.hgx_files
    gpu: bool = False  # TESTBED_GPU pose: PCIe GPUs and the driver's state, see render.gpu_files

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def veth_host(self) -> str:
        return f"{PREFIX}-v{self.index}"  # host end, enslaved to the bridge

    @property
    def veth_peer(self) -> str:
        return f"{PREFIX}-p{self.index}"  # node end before it is renamed eth0 in the netns

    @property
    def address(self) -> str:
        return str(SUBNET.network_address + NODE_HOST_OFFSET + self.index)

    @property
    def run_dir(self) -> Path:
        return RUN_DIR / "nodes" / self.name


def parse_mix(spec: str | None) -> tuple[str, ...]:
    """`alma8,rocky9` -> ('alma8', 'rocky9'); empty -> the default mix."""
    if not spec:
        return DEFAULT_MIX
    keys = tuple(k.strip() for k in spec.split(",") if k.strip())
    unknown = [k for k in keys if k not in RELEASES]
    if unknown:
        raise ValueError(
            f"unknown EL release(s) {', '.join(unknown)} in TESTBED_MIX; "
            f"known: {', '.join(RELEASES)}"
        )
    return keys or DEFAULT_MIX


HGX_BOARD_NAMES = ("h100", "b200")


def parse_hgx(spec: str | None) -> dict[int, str]:
    """`node1=b200,node3=h100` -> {1: 'b200', 3: 'h100'} (TESTBED_HGX); empty -> {}."""
    out: dict[int, str] = {}
    for raw in (spec or "").split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, board = item.partition("=")
        index = name.strip().removeprefix("node")
        if not sep or not index.isdigit() or board.strip() not in HGX_BOARD_NAMES:
            raise ValueError(
                f"TESTBED_HGX item {item!r}: write nodeN=BOARD with BOARD one of "
                f"{', '.join(HGX_BOARD_NAMES)}, e.g. node1=b200,node3=h100"
            )
        out[int(index)] = board.strip()
    return out


def parse_gpu(spec: str | None) -> set[int]:
    """`node2,node3` -> {2, 3} (TESTBED_GPU); empty -> set()."""
    out: set[int] = set()
    for raw in (spec or "").split(","):
        item = raw.strip()
        if not item:
            continue
        index = item.removeprefix("node")
        if not item.startswith("node") or not index.isdigit() or int(index) < 1:
            raise ValueError(
                f"TESTBED_GPU item {item!r}: write node names, e.g. TESTBED_GPU=node2,node3"
            )
        out.add(int(index))
    return out


def make_nodes(
    count: int,
    mix: tuple[str, ...] = DEFAULT_MIX,
    hgx: dict[int, str] | None = None,
    gpu: set[int] | None = None,
) -> list[Node]:
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"NODES={count}: the testbed supports 1 to {MAX_NODES} nodes")
    hgx = hgx or {}
    gpu = gpu or set()
    for what, indexes in (("TESTBED_HGX", set(hgx)), ("TESTBED_GPU", gpu)):
        beyond = sorted(i for i in indexes if i > count)
        if beyond:
            raise ValueError(f"{what} names node{beyond[0]}, but NODES={count}")
    both = sorted(i for i in gpu if i in hgx)
    if both:
        # an NVSwitch pose shows no GPU (render.py): the two poses describe different systems
        raise ValueError(f"node{both[0]} is in TESTBED_HGX and TESTBED_GPU: choose one pose")
    return [
        Node(i, RELEASES[mix[(i - 1) % len(mix)]], hgx.get(i, ""), i in gpu)
        for i in range(1, count + 1)
    ]


def mirror_url() -> str:
    return f"http://{BRIDGE_ADDRESS}:{HTTP_PORT}"
