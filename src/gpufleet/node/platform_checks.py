"""Platform checks users asked for after failures the other checks missed (issue 30 item 5).

Two checks of what sits under NCCL, each a reader of the system (sysfs, /proc, one command)
and a pure verdict returning a :class:`gpufleet.results.Record`:

* ``pcie_acs``: PCI Access Control Services (ACS) enabled on a PCIe bridge above a GPU or an
  HCA redirects peer-to-peer traffic up to the root complex, so GPU Direct P2P/RDMA crawls or
  all-reduce hangs; NCCL's troubleshooting says to check ``ACSCtl:`` in ``lspci -vvv``
  (``SrcValid+``: enabled) and to disable ACS in the BIOS or with ``setpci``.
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs
  The NCCL maintainers' first question on a hang (https://github.com/NVIDIA/nccl/issues/85,
  https://github.com/NVIDIA/nccl/issues/257).
* ``iommu_mode``: an IOMMU translating DMA addresses (not passthrough) breaks or slows GPU
  Direct: GPUDirect RDMA relies on all PCIe devices seeing the same physical addresses, so an
  IOMMU must be off or in pass-through mode (GPUDirect RDMA, Design Considerations,
  https://docs.nvidia.com/cuda/gpudirect-rdma/index.html; NCCL troubleshooting, same section).

``nvidia-peermem`` loaded and registered with the peer-memory API is ``gpudirect_rdma``'s
(gpufleet.node.ib_ports), and the Fabric Manager's version against the driver's is
``fabric_manager``'s (gpufleet.node.nvswitch): neither is repeated here.

Readers take a filesystem ``root`` (tests pass a fake tree) and a :data:`Runner` for commands.
A check that cannot look (no sysfs, ``lspci`` missing, not root) is ``incomplete``, never
``fail``. :func:`platform_records` runs both. docs/platform-checks.md has the details.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.node.health._common import rec as make_record
from gpufleet.results import Record

PCIE_ACS = "pcie_acs"
IOMMU_MODE = "iommu_mode"

NVIDIA_VENDOR = "10de"
MELLANOX_VENDOR = "15b3"  # Mellanox / NVIDIA networking (ConnectX, BlueField)
#: PCI class prefixes: GPUs 0x03xx (display), HCAs 0x0207 (InfiniBand), 0x0200 (Ethernet/RoCE).
GPU_CLASS_PREFIX = "03"
HCA_CLASSES = ("0207", "0200")
#: ACSCtl bits that send peer-to-peer traffic up to the root complex: NCCL's test is
#: SrcValid+; request and completion redirect are the bits that do the redirecting.
ACS_P2P_FLAGS = ("SrcValid", "ReqRedir", "CmpltRedir")
#: /sys/kernel/iommu_groups/<n>/type: identity is passthrough, DMA and DMA-FQ translate.
IOMMU_IDENTITY = "identity"

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")

ACS_REMEDY = (
    "disable ACS on the named bridges: in the BIOS (ACS, or VT-d/IOMMU where no VM or SR-IOV "
    "needs it), or with `setpci -s <bridge> ECAP_ACS+0x6.w=0000` for each bridge at every "
    "boot (NCCL troubleshooting, PCI Access Control Services); then rerun the check"
)
ACS_INCOMPLETE_REMEDY = (
    "run the check as root with pciutils installed (`dnf install pciutils`): `lspci -vvv` "
    "shows the ACS capability only to root"
)
IOMMU_REMEDY = (
    "boot with the IOMMU in passthrough: `grubby --update-kernel=ALL --args='iommu=pt'` "
    "(Intel: `intel_iommu=on iommu=pt`; AMD: `amd_iommu=on iommu=pt`), then reboot; or turn "
    "VT-d/AMD-Vi off in the BIOS where no VM or SR-IOV needs it"
)
IOMMU_INCOMPLETE_REMEDY = "run the check on the host with /proc and /sys mounted"
PCI_INCOMPLETE_REMEDY = "run the check on the host with /sys mounted"


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str = ""


#: Runs argv; returns None when the command is not installed.
Runner = Callable[[Sequence[str]], CommandOutput | None]


def run_command(argv: Sequence[str], timeout_s: float = 10.0) -> CommandOutput | None:
    """The default :data:`Runner`: None when ``argv[0]`` is not installed (``lspci`` lives in
    /usr/sbin, which a user's PATH may lack); a timeout reads as return code -1."""
    exe = shutil.which(argv[0]) or shutil.which(argv[0], path="/usr/sbin:/sbin:/usr/bin:/bin")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CommandOutput(-1, "", f"{argv[0]}: {exc}")
    return CommandOutput(proc.returncode, proc.stdout, proc.stderr)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


# --------------------------------------------------------------------------- PCI topology


@dataclass(frozen=True)
class PciFunction:
    """One PCI function from sysfs and the bridges above it (root port first)."""

    address: str
    vendor: str  # "10de", no 0x
    device: str
    pci_class: str  # "030200", no 0x
    bridges: tuple[str, ...]
    virtual: bool = False  # an SR-IOV virtual function

    @property
    def kind(self) -> str | None:
        """ "GPU", "HCA" or None."""
        if self.vendor == NVIDIA_VENDOR and self.pci_class.startswith(GPU_CLASS_PREFIX):
            return "GPU"
        if self.vendor == MELLANOX_VENDOR and self.pci_class[:4] in HCA_CLASSES:
            return None if self.virtual else "HCA"
        return None

    @property
    def label(self) -> str:
        return f"{self.kind or 'device'} {self.address}"


def _bridges(real: Path) -> tuple[str, ...]:
    """BDF path components between the host bridge (pciDDDD:BB) and the device itself."""
    parts = real.parts
    start = next((i for i, p in enumerate(parts) if _HOST_BRIDGE.match(p)), None)
    if start is None:
        return ()
    chain = [p for p in parts[start + 1 :] if _BDF.match(p)]
    return tuple(chain[:-1])


def read_pci(root: Path | str = "/") -> list[PciFunction] | None:
    """Every function under ``<root>/sys/bus/pci/devices``; None when that is absent."""
    bus = Path(root) / "sys/bus/pci/devices"
    if not bus.is_dir():
        return None
    found = []
    for link in sorted(bus.iterdir()):
        vendor, device, klass = (_read(link / n) for n in ("vendor", "device", "class"))
        if vendor is None or klass is None:
            continue
        found.append(
            PciFunction(
                address=link.name.lower(),
                vendor=vendor.lower().removeprefix("0x"),
                device=(device or "").lower().removeprefix("0x"),
                pci_class=klass.lower().removeprefix("0x"),
                bridges=_bridges(link.resolve()),
                virtual=(link / "physfn").exists(),
            )
        )
    return found


def endpoints(functions: Sequence[PciFunction]) -> list[PciFunction]:
    """The GPUs and HCAs (physical functions) among ``functions``."""
    return [f for f in functions if f.kind is not None]


def gpu_count(functions: Sequence[PciFunction] | None) -> int | None:
    if functions is None:
        return None
    return sum(1 for f in functions if f.kind == "GPU")


# --------------------------------------------------------------------------- ACS


@dataclass(frozen=True)
class BridgeAcs:
    """One bridge's ACS control as ``lspci -vvv`` shows it."""

    address: str
    root_port: bool
    enabled: tuple[str, ...] = ()  # the ACSCtl flags that are "+"
    has_acs: bool = False
    error: str | None = None  # why it could not be read

    @property
    def redirects(self) -> tuple[str, ...]:
        return tuple(f for f in self.enabled if f in ACS_P2P_FLAGS)


def parse_acs_ctl(text: str) -> tuple[bool, tuple[str, ...]] | None:
    """(has ACS, flags set) from ``lspci -vvv -s <bdf>`` output; None when the extended
    capabilities are hidden (``<access denied>``: not root) or the output is no device's.

    ``ACSCtl:	SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- ...``
    """
    if "<access denied>" in text or "Capabilities:" not in text:
        return None
    for line in text.splitlines():
        head, sep, flags = line.strip().partition(":")
        if sep and head == "ACSCtl":
            return True, tuple(f[:-1] for f in flags.split() if f.endswith("+"))
    return False, ()


def read_bridge_acs(address: str, root_port: bool, run: Runner) -> BridgeAcs | None:
    """One bridge's ACS; None when lspci is not installed."""
    out = run(["lspci", "-vvv", "-s", address])
    if out is None:
        return None
    if out.returncode != 0:
        why = (out.stderr or out.stdout).strip().splitlines()[:1]
        return BridgeAcs(address, root_port, error=f"lspci exit {out.returncode}: {''.join(why)}")
    parsed = parse_acs_ctl(out.stdout)
    if parsed is None:
        return BridgeAcs(
            address, root_port,
            error="capabilities hidden (<access denied>: lspci needs root)"
            if "<access denied>" in out.stdout else "no lspci output for the bridge",
        )  # fmt: skip
    has_acs, flags = parsed
    return BridgeAcs(address, root_port, enabled=flags, has_acs=has_acs)


@dataclass(frozen=True)
class AcsFacts:
    devices: tuple[PciFunction, ...] | None  # GPUs and HCAs; None: no PCI sysfs
    bridges: Mapping[str, BridgeAcs] = field(default_factory=dict)
    lspci_missing: bool = False


def read_acs(
    root: Path | str = "/", run: Runner = run_command,
    functions: Sequence[PciFunction] | None = None,
) -> AcsFacts:  # fmt: skip
    """The GPUs and HCAs, and the ACS control of every bridge above them."""
    funcs = read_pci(root) if functions is None else functions
    if funcs is None:
        return AcsFacts(devices=None)
    devices = tuple(endpoints(funcs))
    roots = {d.bridges[0] for d in devices if d.bridges}
    order = sorted({b for d in devices for b in d.bridges})
    bridges: dict[str, BridgeAcs] = {}
    for bdf in order:
        acs = read_bridge_acs(bdf, bdf in roots, run)
        if acs is None:
            return AcsFacts(devices=devices, lspci_missing=True)
        bridges[bdf] = acs
    return AcsFacts(devices=devices, bridges=bridges)


def _below(bridge: str, devices: Sequence[PciFunction]) -> str:
    return ", ".join(d.label for d in devices if bridge in d.bridges)


def pcie_acs(facts: AcsFacts) -> Record:
    """No PCIe switch port above a GPU or HCA redirects peer traffic (ACS off): fail on a
    switch port with ACS on, warn on a root port with ACS on (peer traffic between root ports
    crosses the root complex anyway, but NCCL's advice is ACS off on every bridge)."""
    threshold = "ACSCtl " + "- ".join(ACS_P2P_FLAGS) + "- on bridges above GPUs/HCAs"
    if facts.devices is None:
        return make_record(
            PCIE_ACS, "incomplete", "/sys/bus/pci/devices is absent: the PCI topology "
            "cannot be read.", threshold=threshold, remedy=PCI_INCOMPLETE_REMEDY,
        )  # fmt: skip
    if not facts.devices:
        return make_record(
            PCIE_ACS, "skip", "no NVIDIA GPU and no Mellanox/NVIDIA HCA on the PCI bus"
        )
    if not any(d.bridges for d in facts.devices):
        return make_record(
            PCIE_ACS, "skip",
            f"no PCIe bridge above {', '.join(d.label for d in facts.devices)} (devices on "
            "the root bus, as in a VM): the bridges' ACS is the host's",
        )  # fmt: skip
    if facts.lspci_missing:
        return make_record(
            PCIE_ACS, "incomplete", "lspci is not installed: the bridges' ACS control cannot "
            "be read.", threshold=threshold, remedy=ACS_INCOMPLETE_REMEDY,
        )  # fmt: skip
    value = {
        b.address: {
            "root_port": b.root_port,
            "acs": b.has_acs,
            "enabled": list(b.enabled),
            "error": b.error,
        }
        for b in facts.bridges.values()
    }
    on = [b for b in facts.bridges.values() if b.redirects]
    unread = [b for b in facts.bridges.values() if b.error]
    switch_on = [b for b in on if not b.root_port]
    root_on = [b for b in on if b.root_port]

    def describe(bs: Sequence[BridgeAcs]) -> str:
        return "; ".join(
            f"bridge {b.address} (ACSCtl {' '.join(f + '+' for f in b.redirects)}) above "
            f"{_below(b.address, facts.devices or ())}"
            for b in bs
        )

    unread_text = "; ".join(f"{b.address}: {b.error}" for b in unread)
    if switch_on:
        extra = f" Also unreadable: {unread_text}." if unread else ""
        return make_record(
            PCIE_ACS, "fail",
            f"ACS enabled on {len(switch_on)} PCIe switch port(s): {describe(switch_on)}: "
            "peer-to-peer traffic goes up to the root complex (GPU Direct P2P/RDMA slow, "
            f"all-reduce may hang).{extra}",
            value=value, threshold=threshold, remedy=ACS_REMEDY,
        )  # fmt: skip
    if unread:
        return make_record(
            PCIE_ACS, "incomplete",
            f"ACS control of {len(unread)} of {len(facts.bridges)} bridge(s) unreadable: "
            f"{unread_text}.",
            value=value, threshold=threshold, remedy=ACS_INCOMPLETE_REMEDY,
        )  # fmt: skip
    if root_on:
        return make_record(
            PCIE_ACS, "warn",
            f"ACS enabled on {len(root_on)} root port(s): {describe(root_on)}; no switch port "
            "redirects. Peer traffic between root ports is validated at the root complex.",
            value=value, threshold=threshold, remedy=ACS_REMEDY,
        )  # fmt: skip
    return make_record(
        PCIE_ACS, "pass",
        f"ACS redirect off on all {len(facts.bridges)} bridge(s) above "
        f"{len(facts.devices)} GPU(s)/HCA(s).",
        value=value, threshold=threshold,
    )  # fmt: skip


# --------------------------------------------------------------------------- IOMMU


@dataclass(frozen=True)
class IommuFacts:
    cmdline: str | None  # /proc/cmdline; None: unreadable
    units: tuple[str, ...]  # /sys/class/iommu entries: dmar0 (Intel), ivhd0 (AMD)
    groups: int | None  # entries of /sys/kernel/iommu_groups; None: no such directory
    domains: Mapping[str, str | None]  # GPU/HCA address -> its group's type (None: none)
    gpus: int | None  # NVIDIA GPUs on the PCI bus; None: PCI sysfs unreadable


def iommu_args(cmdline: str | None) -> list[str]:
    """The IOMMU arguments of a kernel command line (``intel_iommu=on iommu=pt``)."""
    words = (cmdline or "").split()
    return [w for w in words if w.split("=", 1)[0].split(".", 1)[0].endswith("iommu")]


def read_iommu(
    root: Path | str = "/", functions: Sequence[PciFunction] | None = None
) -> IommuFacts:
    base = Path(root)
    funcs = read_pci(root) if functions is None else functions
    units_dir = base / "sys/class/iommu"
    groups_dir = base / "sys/kernel/iommu_groups"
    units = tuple(sorted(p.name for p in units_dir.iterdir())) if units_dir.is_dir() else ()
    groups = len(list(groups_dir.iterdir())) if groups_dir.is_dir() else None
    domains: dict[str, str | None] = {}
    for f in endpoints(funcs or ()):
        group = base / "sys/bus/pci/devices" / f.address / "iommu_group"
        domains[f.address] = _read(group / "type") if group.exists() else None
    return IommuFacts(
        cmdline=_read(base / "proc/cmdline"),
        units=units,
        groups=groups,
        domains=domains,
        gpus=gpu_count(funcs),
    )


def iommu_state(facts: IommuFacts) -> tuple[str, str]:
    """(mode, how it was found): mode is off, passthrough, translated or unknown."""
    typed = {a: t for a, t in facts.domains.items() if t}
    if typed:
        translated = sorted(a for a, t in typed.items() if t != IOMMU_IDENTITY)
        if translated:
            return "translated", ", ".join(f"{a} domain {typed[a]}" for a in translated)
        return "passthrough", f"{len(typed)} device(s) in identity domains"
    if not facts.units and not facts.groups:
        if facts.groups is None and facts.cmdline is None:
            return "unknown", "/proc/cmdline and /sys/kernel/iommu_groups unreadable"
        return "off", "no IOMMU unit in /sys/class/iommu and no IOMMU group"
    args = iommu_args(facts.cmdline)
    if "iommu=pt" in args or "iommu.passthrough=1" in args:
        return "passthrough", "kernel command line " + " ".join(args)
    return "translated", (
        f"{len(facts.units)} IOMMU unit(s), {facts.groups or 0} group(s), no passthrough "
        f"argument on the command line ({' '.join(args) or 'no IOMMU argument'})"
    )


def iommu_mode(facts: IommuFacts) -> Record:
    """Off or passthrough where GPUs are: translated is a warn."""
    threshold = "off or passthrough (iommu=pt)"
    mode, how = iommu_state(facts)
    args = " ".join(iommu_args(facts.cmdline)) or "none"
    if facts.gpus is None:
        return make_record(
            IOMMU_MODE, "incomplete", "/sys/bus/pci/devices is absent: cannot tell whether "
            f"GPUs are present (IOMMU {mode}: {how}).",
            value=mode, threshold=threshold, remedy=PCI_INCOMPLETE_REMEDY,
        )  # fmt: skip
    if facts.gpus == 0:
        return make_record(
            IOMMU_MODE, "skip", f"no NVIDIA GPU on the PCI bus (IOMMU {mode})", value=mode
        )
    if mode == "unknown":
        return make_record(
            IOMMU_MODE, "incomplete", f"IOMMU mode unknown: {how}.",
            value=mode, threshold=threshold, remedy=IOMMU_INCOMPLETE_REMEDY,
        )  # fmt: skip
    if mode == "translated":
        return make_record(
            IOMMU_MODE, "warn",
            f"IOMMU translating DMA with {facts.gpus} GPU(s) present ({how}; kernel IOMMU "
            f"arguments: {args}): GPU Direct P2P/RDMA traffic is remapped or blocked.",
            value=mode, threshold=threshold, remedy=IOMMU_REMEDY,
        )  # fmt: skip
    return make_record(
        IOMMU_MODE, "pass", f"IOMMU {mode} ({how}; kernel IOMMU arguments: {args}).",
        value=mode, threshold=threshold,
    )  # fmt: skip


# --------------------------------------------------------------------------- both


def platform_records(root: Path | str = "/", run: Runner = run_command) -> list[Record]:
    """The platform checks of this machine (or of a fake tree under ``root``): ``pcie_acs``
    and ``iommu_mode``, reading the PCI bus once."""
    funcs = read_pci(root)
    return [
        pcie_acs(read_acs(root, run, funcs)),
        iommu_mode(read_iommu(root, funcs)),
    ]
