"""Fabric Manager packages for an NVSwitch node: which, at which version, and whether the
repository has them (the provisioning side of docs/hgx.md).

* :func:`fabric_needs`: NVSwitch system? NVLink 5? Fabric Manager and NVLSM wanted?
* :func:`parse_module_profiles` / :func:`parse_module_artifacts`: ``dnf module info
  [--profile] nvidia-driver:<stream>`` output (EL8/9).
* :func:`fm_package_names`, :func:`transaction_specs`, :func:`exact_specs`: what the
  nvidia_driver role asks dnf for.
* :func:`probe_verdict`: preflight's refusal when the configured repository has no Fabric
  Manager of the driver version the node will run.

Facts (with their public sources, docs/hgx.md):

* Fabric Manager is needed on every NVSwitch system and its version must equal the driver's
  exactly, or it refuses to start (NVIDIA Fabric Manager user guide,
  https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html).
* Fourth-generation NVSwitch systems (HGX B200/B100, NVLink 5) also need the NVLink Subnet
  Manager (NVLSM) and the ``ib_umad`` kernel module (same guide, sections 1.3.2 and 1.5).
  gpufleet calls a node NVLink 5 when it has NVSwitches and a GPU of compute capability
  10.x or newer (B200 is sm_100, B300 sm_103).
* EL8/9: NVIDIA's ``nvidia-driver`` module streams carry an ``fm`` profile; EL10 has no
  modularity and the branches ship ``nvidia-fabricmanager`` (+ ``nvlsm``) packages (NVIDIA
  Driver Installation Guide, https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/).
  The EL8/9 names are read from the stream's metadata (``fm`` profile minus ``default``), never
  hard-coded; ``nvidia_driver_fabricmanager_packages`` overrides them on every EL.
* The installed driver's version is the version of ``nvidia-kmod-common``, which every
  flavour of the driver packages requires (NVIDIA/yum-packaging-nvidia-kmod-common).

Pure functions, controller side (filters ``gpufleet.core.fabric_needs``,
``gpufleet.core.fabricmanager_names``, ...; ``probe_verdict`` through the action
``gpufleet.core.preflight``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.planning import versions as V
from gpufleet.planning.gpuarch import ArchError, parse_arch
from gpufleet.planning.pci import nvswitches, parse_lspci_nn

SETTINGS = ("auto", "always", "never")
#: Compute capability from which an NVSwitch system is NVLink 5 (needs NVLSM and ib_umad).
NVLINK5_MIN_MAJOR = 10
#: EL10 (no modularity): the package names of NVIDIA's branches.
EL10_FM_PACKAGES = ("nvidia-fabricmanager",)
NVLSM_PACKAGES = ("nvlsm",)
#: The package whose version is the installed driver's version.
DRIVER_VERSION_PACKAGE = "nvidia-kmod-common"
FM_UNIT = "nvidia-fabricmanager"
UMAD_MODULE = "ib_umad"
PROBE_REPO_ID = "gpufleet-cuda-probe"


class FabricChoiceError(ValueError):
    """A setting that cannot work; the message names the variable."""


def nvswitches_from_lspci(text: str | Sequence[str]) -> list[str]:
    """PCI addresses of the NVSwitches in ``lspci -nn -d 10de:`` output."""
    if not isinstance(text, str):
        text = "\n".join(str(t) for t in text)
    return nvswitches(parse_lspci_nn(text))


def _setting(value: object, name: str) -> str:
    text = str(value if value is not None else "auto").strip().lower()
    if text in ("true", "yes", "on"):
        text = "always"
    elif text in ("false", "no", "off"):
        text = "never"
    if text not in SETTINGS:
        raise FabricChoiceError(f"{name}={value!r}: choose auto, always or never")
    return text


def is_nvlink5(switches: Sequence[str], gpu_archs: Iterable[str]) -> bool:
    """NVSwitches and a GPU of compute capability 10.x or newer (B200, B300)."""
    if not switches:
        return False
    for arch in gpu_archs or ():
        try:
            cc = parse_arch(str(arch))
        except ArchError:
            continue
        if cc[0] >= NVLINK5_MIN_MAJOR:
            return True
    return False


def fabric_needs(
    switches: Sequence[str] | None,
    gpu_archs: Iterable[str] | None = (),
    fabricmanager: object = "auto",
    nvlsm: object = "auto",
) -> dict[str, Any]:
    """What an NVSwitch node needs: ``{nvswitches, nvlink5, fabricmanager, nvlsm, reason}``.

    ``fabricmanager``/``nvlsm``: auto (from the PCI bus and the GPU architectures), always
    or never. NVLSM is installed only together with Fabric Manager.
    """
    switches = list(switches or [])
    fm_set = _setting(fabricmanager, "nvidia_driver_fabricmanager")
    sm_set = _setting(nvlsm, "nvidia_driver_nvlsm")
    nvl5 = is_nvlink5(switches, gpu_archs or ())
    fm = fm_set == "always" or (fm_set == "auto" and bool(switches))
    sm = fm and (sm_set == "always" or (sm_set == "auto" and nvl5))
    if fm_set == "never":
        reason = "nvidia_driver_fabricmanager: never"
    elif fm_set == "always":
        reason = "nvidia_driver_fabricmanager: always"
    elif switches:
        reason = f"{len(switches)} NVSwitch(es) on the PCI bus"
    else:
        reason = "no NVSwitch on the PCI bus"
    if sm:
        reason += "; NVLink 5 (NVLSM, ib_umad)" if sm_set == "auto" else "; nvidia_driver_nvlsm"
    return {"nvswitches": switches, "nvlink5": nvl5, "fabricmanager": fm, "nvlsm": sm,
            "reason": reason}  # fmt: skip


# ---------------------------------------------------------------- dnf module info output

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_KV = re.compile(r"^(?P<key>[^:]*?)\s*:\s?(?P<value>.*)$")


def _blocks(text: str) -> Iterable[tuple[str, str]]:
    """(key, value) of ``dnf module info`` lines; a continuation line repeats the last key."""
    key = ""
    for line in text.splitlines():
        m = _KV.match(line)
        if m is None or line.startswith("Hint:"):
            continue
        if m["key"].strip():
            key = m["key"].strip()
        yield key, m["value"].strip()


def parse_module_profiles(text: str) -> dict[str, list[str]]:
    """``dnf module info --profile NAME:STREAM`` -> {profile: [rpm names]} (every module
    version of the stream merged; ``[d]`` marks dropped)::

        Name    : nvidia-driver:580-open:20251130000000:4e9c8a1b:x86_64
        default : nvidia-open
        fm      : nvidia-fabricmanager
                : nvidia-open
    """
    out: dict[str, set[str]] = {}
    for key, value in _blocks(text):
        if key == "Name" or not value:
            continue
        profile = re.sub(r"\s*\[[a-z]\]$", "", key).strip()
        out.setdefault(profile, set()).add(value)
    return {k: sorted(v) for k, v in sorted(out.items())}


def parse_module_artifacts(text: str) -> list[str]:
    """``dnf module info NAME:STREAM`` -> the NEVRAs listed under ``Artifacts``."""
    return sorted({v for k, v in _blocks(text) if k == "Artifacts" and v})


def split_nevra(nevra: str) -> tuple[str, str]:
    """``nvidia-open-3:580.95.05-1.el9.x86_64`` -> (``nvidia-open``, ``580.95.05``)."""
    base = nevra.rpartition(".")[0] or nevra
    name_ver = base.rpartition("-")[0]
    name, _, evr = name_ver.rpartition("-")
    version = evr.split(":", 1)[-1]
    return name, version


def versions_by_name(lines: Iterable[str]) -> dict[str, set[str]]:
    """NEVRAs (``dnf module info``) or ``NAME VERSION`` lines (``repoquery --qf``) ->
    {name: {versions}}."""
    out: dict[str, set[str]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and _NAME.fullmatch(parts[0]):
            name, version = parts
        elif len(parts) == 1 and ":" in parts[0]:
            name, version = split_nevra(parts[0])
        else:
            continue
        out.setdefault(name, set()).add(version)
    return out


# ---------------------------------------------------------------- names and specs


def fm_package_names(
    el_major: int | str,
    profiles: Mapping[str, Sequence[str]] | None = None,
    override: Sequence[str] | None = None,
) -> list[str]:
    """Fabric Manager package names: the override, else EL8/9 the stream's ``fm`` profile
    minus its ``default`` profile, else (EL10) ``nvidia-fabricmanager``."""
    if override:
        return [str(n) for n in override]
    if int(el_major) in (8, 9):
        profiles = profiles or {}
        default = set(profiles.get("default") or ())
        return sorted(n for n in profiles.get("fm") or () if n not in default)
    return list(EL10_FM_PACKAGES)


def transaction_specs(
    el_major: int | str,
    names: Sequence[str],
    branch: str | None,
    nvlsm: Sequence[str] = (),
    installed: str | None = None,
) -> list[str]:
    """Specs added to the driver's own dnf transaction. With a driver of the wanted branch
    installed (``installed``, the version of nvidia-kmod-common), which the role keeps:
    exactly its version. Otherwise (a first install, a branch change) the newest of the
    branch, like the driver: on EL10 held to it (``nvidia-fabricmanager-580.*``), on EL8/9
    selected by the stream (and moved by ``dnf module switch-to``)."""
    if installed and V.is_driver_version(installed) and _in_branch(installed, branch):
        return exact_specs(names, installed) + [str(n) for n in nvlsm]
    held = int(el_major) >= 10 and bool(branch)
    return [f"{n}-{branch}.*" if held else str(n) for n in names] + [str(n) for n in nvlsm]


def exact_specs(names: Sequence[str], driver_version: str) -> list[str]:
    """``NAME-VERSION`` of every Fabric Manager package at the driver's exact version."""
    if not V.is_driver_version(driver_version):
        raise FabricChoiceError(
            f"{DRIVER_VERSION_PACKAGE} version {driver_version!r} is not a driver version: "
            "the driver packages are not installed"
        )
    return [f"{n}-{driver_version}" for n in names]


def version_mismatches(installed: Iterable[str], names: Sequence[str], driver: str) -> list[str]:
    """``NAME VERSION`` lines (rpm -q --qf) -> the Fabric Manager packages not at ``driver``."""
    have = versions_by_name(installed)
    out = []
    for n in names:
        got = sorted(have.get(n, set()))
        if got != [driver]:
            out.append(f"{n} {', '.join(got) or 'not installed'}")
    return out


# ---------------------------------------------------------------- preflight probe


def _in_branch(version: str, branch: str | None) -> bool:
    if not branch:
        return True
    try:
        return V.driver_branch(version) == int(branch)
    except ValueError:
        return False


def target_driver_version(
    installed: str | None, available: Iterable[str], branch: str | None
) -> str | None:
    """The driver version the node runs after provisioning: the installed one when it is of
    the wanted branch (an installed driver is never upgraded by the role), else the newest
    available one of the branch."""
    if installed and V.is_driver_version(installed) and _in_branch(installed, branch):
        return installed
    cands = [v for v in available if V.is_driver_version(v) and _in_branch(v, branch)]
    return max(cands, key=lambda v: V.cmp_key(V.parse(v)), default=None)


def parse_probe(text: str) -> dict[str, Any]:
    """The preflight probe's output: ``installed: V`` then sections ``=== NAME (rc=N)``."""
    out: dict[str, Any] = {"installed": "", "sections": {}}
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"^=== (\w+) \(rc=(-?\d+)\)\s*$", line)
        if m:
            current = m[1]
            out["sections"][current] = {"rc": int(m[2]), "lines": []}
        elif current is None and line.startswith("installed:"):
            out["installed"] = line.split(":", 1)[1].strip()
        elif current is not None:
            out["sections"][current]["lines"].append(line)
    return out


def probe_verdict(
    text: str,
    el_major: int | str,
    branch: str | None = "",
    stream: str | None = None,
    override: Sequence[str] | None = None,
    nvlsm: Sequence[str] = (),
    repo: str = "",
) -> dict[str, Any]:
    """{problem, fix, variable, version, names}: ``problem`` is None when the repository has
    the Fabric Manager packages of the driver version the node will run (and NVLSM when
    asked for); else it says what is missing, or quotes dnf's own error."""
    el = int(el_major)
    probe = parse_probe(text)
    result: dict[str, Any] = {
        "problem": None,
        "fix": "",
        "variable": "nvidia_driver_branch",
        "version": None,
        "names": [],
    }
    where = f"the CUDA repository {repo}" if repo else "the CUDA repository"
    for name, sec in probe["sections"].items():
        if sec["rc"] != 0:
            said = " ".join(x.strip() for x in sec["lines"] if x.strip())[-1500:]
            result.update(
                problem=f"the query of {where} for Fabric Manager ({name}) failed, so its "
                f"packages' availability is unknown (dnf said: {said or 'nothing'})",
                fix="fix what dnf reports (the repository must be reachable from the node), "
                "then rerun",
                variable="gpufleet_cuda_repo_baseurl",
            )
            return result
    sections = probe["sections"]
    artifacts = parse_module_artifacts("\n".join(sections.get("artifacts", {}).get("lines", [])))
    have = versions_by_name([*artifacts, *sections.get("packages", {}).get("lines", [])])
    profiles = parse_module_profiles("\n".join(sections.get("profiles", {}).get("lines", [])))
    names = fm_package_names(el, profiles, override)
    result["names"] = names
    what = f"stream nvidia-driver:{stream}" if el in (8, 9) and stream else (
        f"branch {branch}" if branch else "the newest branch")  # fmt: skip
    if not names:
        result.update(
            problem=f"{where} lists no Fabric Manager package in the fm profile of {what}",
            fix="mirror NVIDIA's repository with its module metadata (modules.yaml), or name "
            "the packages in nvidia_driver_fabricmanager_packages",
            variable="nvidia_driver_fabricmanager_packages",
        )
        return result
    version = target_driver_version(
        probe["installed"] or None, have.get(DRIVER_VERSION_PACKAGE, set()), branch
    )
    result["version"] = version
    if version is None:
        result.update(
            problem=f"{where} has no driver of {what} ({DRIVER_VERSION_PACKAGE} not found), so "
            "no Fabric Manager of its version either",
            fix="point gpufleet_cuda_repo_baseurl at a mirror that carries this branch, or pin "
            "nvidia_driver_branch to one it carries",
        )
        return result
    missing = [n for n in names if version not in have.get(n, set())]
    if missing:
        offered = sorted({v for n in missing for v in have.get(n, set())})
        installed = probe["installed"]
        state = f"installed driver {version}" if installed == version else f"driver {version}"
        result.update(
            problem=f"the {state} ({what}) needs {', '.join(missing)} of exactly version "
            f"{version} (Fabric Manager refuses to start on any other), but {where} has "
            + (f"only {', '.join(offered)}" if offered else "none"),
            fix="mirror the Fabric Manager packages of that driver version, or pin "
            "nvidia_driver_branch to a branch whose newest driver has them"
            + (", or update the installed driver first (dnf update 'nvidia-*')"
               if installed == version else ""),
        )  # fmt: skip
        return result
    lacking = [n for n in nvlsm if n not in have]
    if lacking:
        result.update(
            problem=f"this NVLink 5 system needs {', '.join(lacking)} (NVLink Subnet Manager), "
            f"which {where} does not carry",
            fix="mirror NVIDIA's nvlsm package, or set nvidia_driver_nvlsm: never if the "
            "fabric's subnet manager runs elsewhere",
            variable="nvidia_driver_nvlsm",
        )
    return result
