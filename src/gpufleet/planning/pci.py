"""NVIDIA PCI devices from ``lspci -nn`` or sysfs, found without a driver.

NVSwitches are PCI devices of vendor 0x10de and class 0x0680 ("bridge: other"); preflight
reads them from lspci before provisioning, the node checks from sysfs (docs/hgx.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NVIDIA_VENDOR = "10de"
#: PCI class of an NVSwitch: 0x0680, "Bridge: other bridge device".
NVSWITCH_CLASS = "0680"


@dataclass(frozen=True)
class PciDevice:
    address: str  # "0000:05:00.0"
    vendor: str  # "10de", lower case, no 0x
    device: str  # "22a3"
    pci_class: str  # "0680" (class + subclass)

    @property
    def is_nvswitch(self) -> bool:
        return self.vendor == NVIDIA_VENDOR and self.pci_class == NVSWITCH_CLASS


_LSPCI_NN = re.compile(
    r"^(?P<addr>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r".*?\[(?P<cls>[0-9a-fA-F]{4})\]:\s.*\[(?P<ven>[0-9a-fA-F]{4}):(?P<dev>[0-9a-fA-F]{4})\]"
)


def parse_lspci_nn(text: str) -> list[PciDevice]:
    """Devices from ``lspci -nn`` (or ``lspci -D -nn``) output; other lines are ignored.

    ``0000:05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)``
    """
    devices = []
    for line in text.splitlines():
        m = _LSPCI_NN.match(line.strip())
        if m is None:
            continue
        addr = m["addr"] if m["addr"].count(":") == 2 else f"0000:{m['addr']}"
        devices.append(PciDevice(addr.lower(), m["ven"].lower(), m["dev"].lower(), m["cls"]))
    return devices


def read_pci_sysfs(root: Path = Path("/sys/bus/pci/devices")) -> list[PciDevice] | None:
    """Devices from sysfs (``vendor`` 0x10de, ``class`` 0x068000); None when it is absent."""
    if not root.is_dir():
        return None
    devices = []
    for dev in sorted(root.iterdir()):
        try:
            vendor = (dev / "vendor").read_text().strip().lower().removeprefix("0x")
            device = (dev / "device").read_text().strip().lower().removeprefix("0x")
            klass = (dev / "class").read_text().strip().lower().removeprefix("0x")
        except OSError:
            continue
        devices.append(PciDevice(dev.name.lower(), vendor, device, klass[:4]))
    return devices


def nvswitches(devices: Sequence[PciDevice]) -> list[str]:
    """PCI addresses of the NVSwitches among ``devices``."""
    return [d.address for d in devices if d.is_nvswitch]
