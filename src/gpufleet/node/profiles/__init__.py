"""Per-system hardware profiles: what a node of one system type is when healthy, and the
diff of a node against it (issue 30, acceptance against the hardware bought).

* :mod:`gpufleet.inputs.profile_file`: load and validate ``data/profiles/<name>.json`` and a
  site's own profile files (``gpufleet_profiles_dir``; an input, checked before any change);
* :mod:`.profile_match`: pick the profile (named per host, or detected from NVML);
* :mod:`.profile_diff`: one Record per field that differs.

docs/profiles.md describes the files, the shipped profiles and their sources.
"""

from __future__ import annotations

from gpufleet.inputs.profile_file import (
    Figure,
    Profile,
    ProfileFileError,
    load_profile,
    load_profiles,
)
from gpufleet.node.profiles.profile_diff import diff
from gpufleet.node.profiles.profile_match import (
    AUTO,
    INVENTORY_VARIABLE,
    ProfileError,
    detect,
    lookup,
    select,
    select_here,
)

__all__ = [
    "AUTO",
    "INVENTORY_VARIABLE",
    "Figure",
    "Profile",
    "ProfileError",
    "ProfileFileError",
    "detect",
    "diff",
    "load_profile",
    "load_profiles",
    "lookup",
    "select",
    "select_here",
]
