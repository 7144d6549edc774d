"""GPU architectures: compute capabilities, codenames and `lspci` output.

The facts (codename -> compute capability, family, last driver branch) live in
data/compat.json; this module only parses and matches.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.planning.compat import Family, load

# compute capability as (major, minor)
CC = tuple[int, int]

# sm_90, sm90, 90, compute_90; an sm_90a / sm_100f build suffix names the same capability.
_SM = re.compile(r"^(?:sm_?|compute_?)?(\d{1,2})(\d)[af]?$", re.IGNORECASE)
_DOTTED_CC = re.compile(r"^(\d{1,2})\.(\d)$")
_CODENAME = re.compile(r"^[A-Z]{2}\d{2,3}[A-Z]*$")
# "3b:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)"
_LSPCI = re.compile(
    r"^(?P<pci>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+"
    r"(?P<cls>[^:\[]+?)\s*(?:\[(?P<clsid>[0-9a-fA-F]{4})\])?:\s*"
    r"(?P<desc>.*?)\s*(?:\[10de:(?P<dev>[0-9a-fA-F]{4})\])?\s*(?:\(rev [0-9a-fA-F]+\))?\s*$"
)
# A wheel's arch list entry: SASS sm_XY (sm_XYa arch-specific, sm_XYf family-specific) or
# PTX compute_XY; the last digit is the minor ("sm_100" is 10.0).
_ARCH_ENTRY = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")
_GPU_CLASSES = {"0300", "0302"}
_GPU_CLASS_NAMES = {"vga compatible controller", "3d controller"}


class ArchError(ValueError):
    """An architecture string gpufleet cannot interpret."""


def sm(cc: CC) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def cc_str(cc: CC) -> str:
    return f"{cc[0]}.{cc[1]}"


def parse_cc(text: str) -> CC:
    """'8.0' -> (8, 0)."""
    m = _DOTTED_CC.match(text.strip())
    if not m:
        raise ArchError(f"not a compute capability like 8.0: {text!r}")
    return int(m.group(1)), int(m.group(2))


def codename_cc(codename: str) -> tuple[CC, Family, str] | None:
    """Longest known codename that prefixes `codename` ('GA100GL' -> GA100).

    Returns (compute capability, family, matched codename) or None when unknown.
    """
    token = codename.strip().upper()
    best: tuple[CC, Family, str] | None = None
    for fam in load().families:
        for name, cc in fam.codenames.items():
            if token.startswith(name) and (best is None or len(name) > len(best[2])):
                best = (parse_cc(cc), fam, name)
    return best


def family_of(cc: CC) -> Family:
    for fam in load().families:
        if any(parse_cc(c) == cc for c in fam.codenames.values()) or cc[0] in fam.majors:
            return fam
    raise ArchError(f"compute capability {cc_str(cc)} belongs to no known GPU family")


def parse_arch(text: str) -> CC:
    """Accept 'sm_80', 'sm80', '80', '8.0', 'compute_90', 'sm_90a' or a codename like 'GA100'."""
    raw = text.strip()
    if not raw:
        raise ArchError("empty GPU architecture")
    m = _DOTTED_CC.match(raw)
    if m:
        cc = (int(m.group(1)), int(m.group(2)))
    else:
        m2 = _SM.match(raw)
        if m2:
            cc = (int(m2.group(1)), int(m2.group(2)))
        elif _CODENAME.match(raw.upper()):
            hit = codename_cc(raw)
            if hit is None:
                known = ", ".join(sorted({n for f in load().families for n in f.codenames}))
                raise ArchError(f"unknown GPU codename {raw!r} (known: {known})")
            cc = hit[0]
        else:
            raise ArchError(
                f"cannot read GPU architecture {raw!r}: use a compute capability (sm_80 or 8.0) "
                "or a GPU codename (GV100, TU102, GA100, GH100, ...)"
            )
    family_of(cc)  # raises for capabilities outside every known family
    return cc


def covers(cc: CC, arch_list: Iterable[str]) -> str | None:
    """How a build's arch list (``torch.cuda.get_arch_list()`` style) runs on ``cc``, or None.

    SASS ``sm_XY`` (and family-specific ``sm_XYf``) runs on the same major with minor <= the
    device's; arch-specific ``sm_XYa`` only on exactly X.Y; PTX ``compute_XY`` is
    JIT-compiled on any cc >= X.Y. The answer names the best entry: "SASS sm_86" or
    "PTX compute_90 (JIT-compiled at first use)". Unreadable entries are ignored.
    """
    major, minor = cc
    sass: list[tuple[int, str]] = []
    ptx: list[tuple[CC, str]] = []
    for raw in arch_list:
        arch = raw.strip()
        m = _ARCH_ENTRY.match(arch)
        if not m:
            continue
        kind, have = m.group(1), (int(m.group(2)), int(m.group(3)))
        if kind == "sm":
            if m.group(4) == "a" and have != cc:
                continue
            if have[0] == major and have[1] <= minor:
                sass.append((have[1], arch))
        elif have <= cc:
            ptx.append((have, arch))
    if sass:
        return f"SASS {max(sass)[1]}"
    if ptx:
        return f"PTX {max(ptx)[1]} (JIT-compiled at first use)"
    return None


def open_modules_supported(cc: CC) -> bool:
    """Whether NVIDIA's open kernel modules drive a GPU of compute capability ``cc``
    (data/compat.json ``policy.open_modules_min_cc``: Turing, 7.5, and newer)."""
    return cc >= parse_cc(load().policy.open_modules_min_cc)


@dataclass(frozen=True)
class GpuDevice:
    """One NVIDIA GPU function seen by lspci."""

    pci: str
    name: str
    device_id: str | None
    codename: str | None
    cc: CC | None
    family: str | None

    @property
    def arch(self) -> str | None:
        return sm(self.cc) if self.cc else None

    def to_dict(self) -> dict[str, object]:
        return {
            "pci": self.pci,
            "name": self.name,
            "device_id": self.device_id,
            "codename": self.codename,
            "arch": self.arch,
            "cc": cc_str(self.cc) if self.cc else None,
            "family": self.family,
        }


def parse_lspci(text: str) -> list[GpuDevice]:
    """Parse `lspci -nn -d 10de:` (or plain `lspci`) and keep NVIDIA GPUs only.

    Audio functions, USB controllers, bridges and NVSwitches are ignored; a GPU whose
    codename is not known (a device newer than pci.ids) is kept with cc None.
    """
    gpus: list[GpuDevice] = []
    for line in text.splitlines():
        m = _LSPCI.match(line.strip())
        if not m or "nvidia" not in m.group("desc").lower():
            continue
        clsid = m.group("clsid")
        if clsid is not None:
            if clsid not in _GPU_CLASSES:
                continue
        elif m.group("cls").strip().lower() not in _GPU_CLASS_NAMES:
            continue
        desc = re.sub(r"^NVIDIA Corporation\s+", "", m.group("desc"), flags=re.IGNORECASE)
        token = desc.split()[0] if desc.split() else ""
        hit = codename_cc(token) if _CODENAME.match(token.upper()) else None
        gpus.append(
            GpuDevice(
                pci=m.group("pci").lower(),
                name=desc,
                device_id=m.group("dev").lower() if m.group("dev") else None,
                codename=hit[2] if hit else (token or None),
                cc=hit[0] if hit else None,
                family=hit[1].name if hit else None,
            )
        )
    return gpus
