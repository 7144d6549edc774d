"""Target operating systems: 'rocky9', 'el8', 'centos7', 'rhel10', 'almalinux 9.4' ...

Only Enterprise Linux is a target. The EL facts (glibc, NVIDIA repo name) are in
data/compat.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.compat import El, load

# Names as users write them and as Ansible reports ansible_distribution (lowercased).
EL_NAMES = {
    "el": "Enterprise Linux",
    "rhel": "Red Hat Enterprise Linux",
    "redhat": "Red Hat Enterprise Linux",
    "rocky": "Rocky Linux",
    "rockylinux": "Rocky Linux",
    "alma": "AlmaLinux",
    "almalinux": "AlmaLinux",
    "centos": "CentOS",
    "centosstream": "CentOS Stream",
    "stream": "CentOS Stream",
    "ol": "Oracle Linux",
    "oracle": "Oracle Linux",
    "oraclelinux": "Oracle Linux",
}
_OS = re.compile(r"^([a-z]+?)(\d{1,2})(?:\.(\d+))?$")


class OsError(ValueError):
    """An OS string that is not an EL release gpufleet knows."""


@dataclass(frozen=True)
class TargetOs:
    name: str  # display name, e.g. "Rocky Linux"
    major: int
    minor: int | None
    el: El

    @property
    def key(self) -> str:
        return f"el{self.major}"

    def __str__(self) -> str:
        minor = f".{self.minor}" if self.minor is not None else ""
        return f"{self.name} {self.major}{minor}"


def parse_os(text: str) -> TargetOs:
    """Parse a target OS. Raises OsError for non-EL systems or unknown majors."""
    raw = text.strip().lower()
    compact = re.sub(r"[\s_\-]+|linux", "", raw)
    m = _OS.match(compact)
    if not m or m.group(1) not in EL_NAMES:
        raise OsError(
            f"unsupported OS {text!r}: gpufleet targets Enterprise Linux only "
            "(RHEL, Rocky, AlmaLinux, CentOS Stream, Oracle Linux), written like "
            "rocky9, el8, rhel10 or almalinux9.4"
        )
    major = int(m.group(2))
    el = load().el.get(major)
    if el is None:
        known = ", ".join(f"el{k}" for k in sorted(load().el))
        raise OsError(f"unknown EL release {text!r} (known: {known})")
    name = EL_NAMES[m.group(1)]
    if m.group(1) == "centos" and major >= 8:
        name = "CentOS Stream"
    return TargetOs(name=name, major=major, minor=int(m.group(3)) if m.group(3) else None, el=el)
