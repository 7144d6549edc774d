"""How the NVIDIA driver is installed on one node, validated against the plan.

* :func:`driver_choice`: flavour, branch, dnf module stream / package names and whether
  DKMS and versionlock are needed (the ``gpufleet.core.nvidia_driver_choice`` filter).
* :func:`versionlock_entries` / :func:`stale_versionlock_entries`: the dnf versionlock lines
  that hold the driver branch on EL10.

Facts come from data/compat.json through :mod:`gpufleet.planning.gpuarch` (which GPUs the open
kernel
modules drive), :mod:`gpufleet.planning.osinfo` (supported EL majors) and
:mod:`gpufleet.planning.versions`
(driver versions and branches). Runs on the controller only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpufleet.planning import versions as V
from gpufleet.planning.compat import load
from gpufleet.planning.gpuarch import ArchError, cc_str, open_modules_supported, parse_arch, sm
from gpufleet.planning.osinfo import supported_majors
from gpufleet.planning.planner import Plan

FLAVORS = ("open", "proprietary")
PACKAGINGS = ("dkms", "precompiled")


class ChoiceError(ValueError):
    """A driver choice that cannot work. ``variable`` names what the user should change."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable
        self.message = message


def _closed_archs(archs: Iterable[str]) -> list[str]:
    """The plan's architectures that NVIDIA's open kernel modules do not drive."""
    old = []
    for arch in archs:
        try:
            cc = parse_arch(arch)
        except ArchError:
            continue
        if not open_modules_supported(cc):
            old.append(arch)
    return sorted(old)


def driver_choice(
    plan: Plan | Mapping[str, Any] | None,
    el_major: int | str,
    flavor: str | None = "",
    branch: str | int | None = "",
    packaging: str = "dkms",
    compute_only: bool = False,
    packages: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Decide how to install the NVIDIA driver on one node.

    ``plan``: the gpufleet plan (a :class:`Plan` or its dict, the ``gpufleet_plan`` fact).
    ``flavor``/``branch``: user overrides ("" = from the plan; branch "latest" follows the
    newest branch). Raises ChoiceError naming the variable.

    Returns a dict: flavor, branch ("" = latest), packaging, method ("module" on EL 8/9,
    "package" on EL 10), module ("nvidia-driver"), stream, packages, versionlock (bool),
    dkms (bool: needs EPEL dkms, CRB and kernel-devel), gcc_cxx (open DKMS build needs g++).
    """
    if plan is not None and not isinstance(plan, Plan):
        plan = Plan.from_dict(plan)
    el_major = int(el_major)
    if el_major not in supported_majors():
        raise ChoiceError("ansible_distribution_major_version", f"EL {el_major} has no driver path")
    if packaging not in PACKAGINGS:
        raise ChoiceError(
            "nvidia_driver_packaging",
            f"nvidia_driver_packaging={packaging!r}: choose one of {', '.join(PACKAGINGS)}",
        )
    flavor = str(flavor or "").strip()
    if flavor and flavor not in FLAVORS:
        raise ChoiceError(
            "nvidia_driver_flavor",
            f"nvidia_driver_flavor={flavor!r}: choose open, proprietary or leave it empty (plan)",
        )
    archs = list(plan.gpu_archs) if plan is not None else []
    old = _closed_archs(archs)
    if not flavor:
        flavor = (plan.driver_flavor if plan is not None else None) or (
            "proprietary" if old else "open"
        )
    if flavor == "open" and old:
        floor = parse_arch(load().policy.open_modules_min_cc)
        raise ChoiceError(
            "nvidia_driver_flavor",
            "nvidia_driver_flavor=open but the GPUs include pre-Turing architectures "
            f"({', '.join(old)}); the open kernel modules support {sm(floor)} "
            f"(compute capability {cc_str(floor)}) and newer only: set "
            "nvidia_driver_flavor: proprietary or leave it empty",
        )

    branch_max = plan.branch_max if plan is not None else None
    min_driver = plan.min_driver if plan is not None else None
    min_branch = V.driver_branch(min_driver) if min_driver else None
    branch = str(branch or "").strip()
    if not branch and plan is not None:
        branch = plan.driver_branch or ""
    if branch == "latest":
        if branch_max is not None:
            raise ChoiceError(
                "nvidia_driver_branch",
                f"nvidia_driver_branch=latest would follow branches newer than {branch_max}, "
                f"the newest these GPUs ({', '.join(archs) or '?'}) support: pin "
                f"nvidia_driver_branch to {branch_max} or lower",
            )
        branch = ""
    elif branch:
        if not V.is_driver_branch(branch):
            raise ChoiceError(
                "nvidia_driver_branch",
                f"nvidia_driver_branch={branch!r} is not a driver branch: write three digits "
                "such as 580, 'latest', or leave it empty (plan)",
            )
        if branch_max is not None and int(branch) > branch_max:
            raise ChoiceError(
                "nvidia_driver_branch",
                f"nvidia_driver_branch={branch} is newer than {branch_max}, the last branch "
                f"that supports these GPUs ({', '.join(old or archs) or '?'}): set "
                f"nvidia_driver_branch to {branch_max} or lower",
            )
        if min_branch is not None and int(branch) < min_branch:
            cuda = (plan.cuda if plan is not None else None) or "?"
            raise ChoiceError(
                "nvidia_driver_branch",
                f"nvidia_driver_branch={branch} is older than the driver the torch wheel "
                f"needs (>= {min_driver} for CUDA {cuda}): set nvidia_driver_branch to "
                f"{min_branch} or newer, or choose another gpufleet_cuda_variant",
            )

    dkms = packaging == "dkms"
    out: dict[str, Any] = {
        "flavor": flavor,
        "branch": branch,
        "packaging": packaging,
        "method": "module" if el_major in (8, 9) else "package",
        "module": "nvidia-driver",
        "stream": None,
        "packages": [],
        "versionlock": el_major >= 10 and bool(branch),
        "dkms": dkms,
        "gcc_cxx": dkms and flavor == "open",
    }
    if el_major in (8, 9):
        if packaging == "precompiled":
            stream = branch or "latest"
        elif flavor == "open":
            stream = f"{branch}-open" if branch else "open-dkms"
        else:
            stream = f"{branch}-dkms" if branch else "latest-dkms"
        out["stream"] = stream
        if flavor == "open" and packaging == "dkms":
            pkgs = ["nvidia-open"]
        elif compute_only:
            pkgs = ["nvidia-driver-cuda"]
        else:
            pkgs = ["cuda-drivers"]
    else:
        if packaging == "precompiled":
            raise ChoiceError(
                "nvidia_driver_packaging",
                "nvidia_driver_packaging=precompiled: NVIDIA's rhel10 repository has no "
                "precompiled kmod streams (EL10 has no dnf modularity); use dkms",
            )
        if flavor == "open":
            pkgs = (
                ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"] if compute_only else ["nvidia-open"]
            )
        else:
            pkgs = (
                ["nvidia-driver-cuda", "kmod-nvidia-latest-dkms"]
                if compute_only
                else ["cuda-drivers"]
            )
        if branch:
            # NVIDIA driver packages carry the driver version (epoch 3): hold the branch.
            pkgs = [f"{p}-{branch}.*" for p in pkgs]
    if packages:
        pkgs = [str(p) for p in packages]
    out["packages"] = pkgs
    return out


_LOCKABLE = re.compile(r"nvidia|^cuda-drivers")


def versionlock_entries(choice: Mapping[str, Any], installed: str | list[str]) -> list[str]:
    """Raw versionlock entries that hold the driver branch on EL10.

    ``installed``: lines "NAME VERSION" (rpm -qa --qf '%{NAME} %{VERSION}\n'). Every installed
    NVIDIA driver package of the chosen branch gets "NAME-BRANCH.*": updates inside the branch
    stay allowed, another branch is excluded. Returns the sorted entries.
    """
    branch = choice.get("branch") or ""
    wanted: list[str] = []
    if choice.get("versionlock") and branch:
        for line in installed if isinstance(installed, list) else str(installed).splitlines():
            parts = line.split()
            if len(parts) != 2:
                continue
            name, version = parts
            if _LOCKABLE.search(name) and version.startswith(branch + "."):
                wanted.append(f"{name}-{branch}.*")
    return sorted(set(wanted))


def stale_versionlock_entries(
    locklist: str | list[str], branch: str, wanted: Sequence[str] | None = None
) -> list[str]:
    """Lock entries for NVIDIA driver packages that would block or no longer match the hold.

    Before the install (``wanted`` None): entries of another branch (or all NVIDIA entries when
    following the newest branch). After it: also entries not in ``wanted`` (flavour switched).
    """
    out: list[str] = []
    suffix = f"-{branch}.*" if branch else None
    for line in locklist if isinstance(locklist, list) else str(locklist).splitlines():
        entry = line.strip()
        if not entry or entry.startswith("#") or entry.startswith("!"):
            continue
        if not _LOCKABLE.search(entry):
            continue
        if (
            suffix is None
            or not entry.endswith(suffix)
            or (wanted is not None and entry not in wanted)
        ):
            out.append(entry)
    return out
