# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Pure decisions the provisioning roles take, kept in Python so that they are unit-tested.

* ``el_target``: which EL release a node runs (from Ansible facts or /etc/os-release), the
  planner's OS string for it, NVIDIA's repository directory, and whether gpufleet supports it.
* ``driver_choice``: flavour, branch, dnf module stream / package names and the extra
  repositories an NVIDIA driver install needs, validated against the plan.

No imports beyond the standard library: this file is shipped to nodes as module_utils and
imported on the controller by the filter plugin. Python 3.8 compatible (node interpreters).
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

SUPPORTED_MAJORS = (8, 9, 10)
ARCH_REPO = {"x86_64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}

# ansible_distribution values and /etc/os-release IDs -> planner OS prefix and display name.
DISTRIBUTIONS = {
    "redhat": ("rhel", "Red Hat Enterprise Linux"),
    "rhel": ("rhel", "Red Hat Enterprise Linux"),
    "rocky": ("rocky", "Rocky Linux"),
    "almalinux": ("almalinux", "AlmaLinux"),
    "centos": ("centos", "CentOS"),
    "centosstream": ("centos", "CentOS Stream"),
    "oraclelinux": ("ol", "Oracle Linux"),
    "ol": ("ol", "Oracle Linux"),
}

EL7_REASONS = (
    "EL7 reached end of life (RHEL 7 maintenance ended June 2024, CentOS 7 EOL June 2024)",
    "PyTorch >= 2.7 wheels are manylinux_2_28 and need glibc >= 2.28; EL7 has glibc 2.17",
    "ansible-core >= 2.17 cannot manage EL7's Python (2.7/3.6), so the pinned "
    "ansible-core 2.19 cannot run modules there",
)

FLAVORS = ("open", "proprietary")
PACKAGINGS = ("dkms", "precompiled")
_BRANCH = re.compile(r"^\d{3}$")


class ChoiceError(ValueError):
    """A driver choice that cannot work. ``variable`` names what the user should change."""

    def __init__(self, variable, message):
        super(ChoiceError, self).__init__(message)
        self.variable = variable
        self.message = message


def _norm(text):
    return re.sub(r"[\s_\-]+", "", str(text or "")).lower()


def el_target(distribution, major, arch, release=""):
    """Classify a node.

    ``distribution``: ansible_distribution ("Rocky", "RedHat", "CentOS", "OracleLinux",
    "AlmaLinux") or an os-release ID ("rocky", "rhel", "ol"...); ``major``: EL major (int or
    str; compared as an integer, so 10 > 8); ``arch``: ansible_architecture / uname -m.

    Returns a dict: supported, el_major, os (planner string, e.g. "rocky9"), name, repo
    ("rhel9"), repo_arch ("x86_64"/"sbsa"), refusals (list of text), is_el7.
    """
    key = _norm(distribution)
    if key == "centos" and "stream" in _norm(release):
        key = "centosstream"
    try:
        el_major = int(str(major).split(".")[0])
    except ValueError:
        el_major = 0
    prefix, name = DISTRIBUTIONS.get(key, (None, str(distribution)))
    if prefix == "centos" and el_major >= 8:
        name = "CentOS Stream"
    repo_arch = ARCH_REPO.get(str(arch))
    out = {
        "supported": False,
        "el_major": el_major,
        "os": "%s%d" % (prefix, el_major) if prefix else None,
        "name": name,
        "repo": "rhel%d" % el_major if el_major else None,
        "repo_arch": repo_arch,
        "arch": str(arch),
        "is_el7": prefix is not None and el_major == 7,
        "refusals": [],
    }
    if prefix is None:
        out["refusals"].append(
            "%s %s is not Enterprise Linux; gpufleet provisions RHEL, Rocky, AlmaLinux, "
            "CentOS Stream and Oracle Linux 8, 9 and 10" % (distribution, major)
        )
    elif el_major == 7:
        out["refusals"].append("%s 7 is refused: %s" % (name, "; ".join(EL7_REASONS)))
    elif el_major not in SUPPORTED_MAJORS:
        out["refusals"].append(
            "%s %s is not supported (EL %s); supported: EL %s"
            % (name, major, el_major, ", ".join(str(m) for m in SUPPORTED_MAJORS))
        )
    if repo_arch is None:
        out["refusals"].append(
            "architecture %s has no NVIDIA CUDA repository; supported: x86_64, aarch64 (sbsa)"
            % arch
        )
    out["supported"] = not out["refusals"]
    return out


def is_pre_turing(arch):
    """True for sm_XY below 7.5 (Kepler, Maxwell, Pascal, Volta)."""
    a = str(arch)
    m = re.match(r"^sm_(\d+)$", a)
    if not m:
        return False
    digits = m.group(1)
    major, minor = int(digits[:-1]), int(digits[-1])
    return (major, minor) < (7, 5)


def driver_choice(
    plan,
    el_major,
    flavor="",
    branch="",
    packaging="dkms",
    compute_only=False,
    packages=None,
):
    """Decide how to install the NVIDIA driver on one node.

    ``plan``: the gpufleet plan dict (keys driver_branch, driver_branch_max, driver_flavor,
    min_driver, gpu_archs). ``flavor``/``branch``: user overrides ("" = from the plan;
    branch "latest" follows the newest branch). Raises ChoiceError naming the variable.

    Returns a dict: flavor, branch ("" = latest), packaging, method ("module" on EL 8/9,
    "package" on EL 10), module ("nvidia-driver"), stream, packages, versionlock (bool),
    dkms (bool: needs EPEL dkms, CRB and kernel-devel), gcc_cxx (open DKMS build needs g++).
    """
    plan = plan or {}
    el_major = int(el_major)
    if el_major not in SUPPORTED_MAJORS:
        raise ChoiceError(
            "ansible_distribution_major_version", "EL %d has no driver path" % el_major
        )
    if packaging not in PACKAGINGS:
        raise ChoiceError(
            "nvidia_driver_packaging",
            "nvidia_driver_packaging=%r: choose one of %s" % (packaging, ", ".join(PACKAGINGS)),
        )
    flavor = str(flavor or "").strip()
    if flavor and flavor not in FLAVORS:
        raise ChoiceError(
            "nvidia_driver_flavor",
            "nvidia_driver_flavor=%r: choose open, proprietary or leave it empty (plan)" % flavor,
        )
    archs = [str(a) for a in (plan.get("gpu_archs") or [])]
    old = sorted(a for a in archs if is_pre_turing(a))
    plan_flavor = plan.get("driver_flavor") or ("proprietary" if old else "open")
    if not flavor:
        flavor = plan_flavor
    if flavor == "open" and old:
        raise ChoiceError(
            "nvidia_driver_flavor",
            "nvidia_driver_flavor=open but the GPUs include pre-Turing architectures (%s); "
            "the open kernel modules support Turing (sm_75) and newer only: set "
            "nvidia_driver_flavor: proprietary or leave it empty" % ", ".join(old),
        )

    branch_max = plan.get("driver_branch_max")
    branch_max = int(branch_max) if branch_max else None
    min_driver = plan.get("min_driver")
    min_branch = int(str(min_driver).split(".")[0]) if min_driver else None
    branch = str(branch or "").strip()
    if not branch:
        branch = str(plan.get("driver_branch") or "")
    if branch == "latest":
        if branch_max is not None:
            raise ChoiceError(
                "nvidia_driver_branch",
                "nvidia_driver_branch=latest would follow branches newer than %d, the newest "
                "these GPUs (%s) support: pin nvidia_driver_branch to %d or lower"
                % (branch_max, ", ".join(archs) or "?", branch_max),
            )
        branch = ""
    elif branch:
        if not _BRANCH.match(branch):
            raise ChoiceError(
                "nvidia_driver_branch",
                "nvidia_driver_branch=%r is not a driver branch: write three digits such as "
                "580, 'latest', or leave it empty (plan)" % branch,
            )
        if branch_max is not None and int(branch) > branch_max:
            raise ChoiceError(
                "nvidia_driver_branch",
                "nvidia_driver_branch=%s is newer than %d, the last branch that supports "
                "these GPUs (%s): set nvidia_driver_branch to %d or lower"
                % (branch, branch_max, ", ".join(old or archs) or "?", branch_max),
            )
        if min_branch is not None and int(branch) < min_branch:
            raise ChoiceError(
                "nvidia_driver_branch",
                "nvidia_driver_branch=%s is older than the driver the torch wheel needs "
                "(>= %s for CUDA %s): set nvidia_driver_branch to %d or newer, or choose "
                "another gpufleet_cuda_variant"
                % (branch, min_driver, plan.get("cuda") or "?", min_branch),
            )

    dkms = packaging == "dkms"
    out = {
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
            stream = "%s-open" % branch if branch else "open-dkms"
        else:
            stream = "%s-dkms" % branch if branch else "latest-dkms"
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
            pkgs = ["%s-%s.*" % (p, branch) for p in pkgs]
    if packages:
        pkgs = [str(p) for p in packages]
    out["packages"] = pkgs
    return out


_LOCKABLE = re.compile(r"nvidia|^cuda-drivers")


def versionlock_entries(choice, installed):
    """Raw versionlock entries that hold the driver branch on EL10.

    ``installed``: lines "NAME VERSION" (rpm -qa --qf '%{NAME} %{VERSION}\n'). Every installed
    NVIDIA driver package of the chosen branch gets "NAME-BRANCH.*": updates inside the branch
    stay allowed, another branch is excluded. Returns the sorted entries.
    """
    branch = choice.get("branch") or ""
    wanted = []
    if choice.get("versionlock") and branch:
        for line in installed if isinstance(installed, list) else str(installed).splitlines():
            parts = line.split()
            if len(parts) != 2:
                continue
            name, version = parts
            if _LOCKABLE.search(name) and version.startswith(branch + "."):
                wanted.append("%s-%s.*" % (name, branch))
    return sorted(set(wanted))


def stale_versionlock_entries(locklist, branch, wanted=None):
    """Lock entries for NVIDIA driver packages that would block or no longer match the hold.

    Before the install (``wanted`` None): entries of another branch (or all NVIDIA entries when
    following the newest branch). After it: also entries not in ``wanted`` (flavour switched).
    """
    out = []
    suffix = "-%s.*" % branch if branch else None
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
