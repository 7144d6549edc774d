"""Target operating systems: 'rocky9', 'el8', 'centos7', 'rhel10', 'almalinux 9.4' ...

Only Enterprise Linux is a target. The EL facts (glibc, NVIDIA repo name) are in
data/compat.json.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.planning.compat import El, load

# The one distribution table: names as users write them, ansible_distribution values and
# /etc/os-release IDs (lowercased, without blanks, "_", "-" or "linux"; see _key) ->
# (prefix of the planner's OS string, display name).
DISTRIBUTIONS: dict[str, tuple[str, str]] = {
    "el": ("el", "Enterprise Linux"),
    "rhel": ("rhel", "Red Hat Enterprise Linux"),
    "redhat": ("rhel", "Red Hat Enterprise Linux"),
    "rocky": ("rocky", "Rocky Linux"),
    "alma": ("almalinux", "AlmaLinux"),
    "centos": ("centos", "CentOS"),
    "centosstream": ("centos", "CentOS Stream"),
    "stream": ("centos", "CentOS Stream"),
    "ol": ("ol", "Oracle Linux"),
    "oracle": ("ol", "Oracle Linux"),
}
#: ansible_architecture / uname -m -> directory of NVIDIA's CUDA repository.
ARCH_REPO = {"x86_64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}
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


def _key(text: object) -> str:
    """'Rocky Linux' / 'rockylinux' / 'RedHat' / 'Oracle_Linux' -> 'rocky', 'redhat', 'oracle'."""
    return re.sub(r"[\s_\-]+|linux", "", str(text or "").lower())


def _display(key: str, major: int) -> str:
    name = DISTRIBUTIONS[key][1]
    return "CentOS Stream" if DISTRIBUTIONS[key][0] == "centos" and major >= 8 else name


def parse_os(text: str) -> TargetOs:
    """Parse a target OS. Raises OsError for non-EL systems or unknown majors."""
    m = _OS.match(_key(text.strip()))
    if not m or m.group(1) not in DISTRIBUTIONS:
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
    name = _display(m.group(1), major)
    return TargetOs(name=name, major=major, minor=int(m.group(3)) if m.group(3) else None, el=el)


def supported_majors() -> tuple[int, ...]:
    """EL majors gpufleet provisions (data/compat.json ``el[].supported``)."""
    return tuple(sorted(m for m, el in load().el.items() if el.supported))


def el_target(
    distribution: object, major: object, arch: object, release: object = ""
) -> dict[str, Any]:
    """Classify a node for the roles (the ``gpufleet.core.el_target`` filter).

    ``distribution``: ansible_distribution ("Rocky", "RedHat", "OracleLinux", ...) or an
    os-release ID ("rocky", "rhel", "ol", "almalinux", ...); ``major``: EL major (compared as
    an integer, so 10 > 8); ``arch``: ansible_architecture / uname -m; ``release``: the
    release name or os-release NAME ("Stream" marks CentOS Stream).

    Returns a dict: supported, el_major, os (planner string, e.g. "rocky9", read back by
    :func:`parse_os`), name, repo ("rhel9"), repo_arch ("x86_64"/"sbsa"), arch, is_el7,
    refusals (list of text).
    """
    key = _key(distribution)
    if key == "centos" and "stream" in _key(release):
        key = "centosstream"
    try:
        el_major = int(str(major).split(".")[0])
    except ValueError:
        el_major = 0
    known = key in DISTRIBUTIONS
    prefix = DISTRIBUTIONS[key][0] if known else None
    name = _display(key, el_major) if known else str(distribution)
    repo_arch = ARCH_REPO.get(str(arch))
    majors = supported_majors()
    refusals: list[str] = []
    el = load().el.get(el_major)
    if not known:
        refusals.append(
            f"{distribution} {major} is not Enterprise Linux; gpufleet provisions RHEL, Rocky, "
            f"AlmaLinux, CentOS Stream and Oracle Linux {', '.join(map(str, majors[:-1]))} "
            f"and {majors[-1]}"
        )
    elif el_major == 7 and el is not None:
        refusals.append(f"{name} 7 is refused: {el.why_unsupported}")
    elif el_major not in majors:
        refusals.append(
            f"{name} {major} is not supported (EL {el_major}); supported: EL "
            + ", ".join(map(str, majors))
        )
    if repo_arch is None:
        refusals.append(
            f"architecture {arch} has no NVIDIA CUDA repository; supported: x86_64, aarch64 (sbsa)"
        )
    return {
        "supported": not refusals,
        "el_major": el_major,
        "os": f"{prefix}{el_major}" if prefix else None,
        "name": name,
        "repo": f"rhel{el_major}" if el_major else None,
        "repo_arch": repo_arch,
        "arch": str(arch),
        "is_el7": known and el_major == 7,
        "refusals": refusals,
    }
