"""The ``profile`` check: the node against its system profile (gpufleet.node.profiles,
docs/profiles.md), as one record.

The profile diff gives one finding per field that differs (``profile_gpu_count``,
``profile_nvlink``, ...); the check folds them into the one record a suite test ends with:
its status is the worst finding's (pass when none), its message lists each finding as
"expected X, found Y", its remedy each finding's remedy once. :func:`profile_meta` keeps the
findings themselves for the result file's ``meta`` (the report's "Hardware profile" line).
A profile that cannot be chosen (an unknown name, a node auto detection cannot place, a
malformed profile file) is a failed record whose remedy says to set
``gpufleet_system_profile``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpufleet.errors import GpufleetError
from gpufleet.node.health import names
from gpufleet.node.health._common import rec
from gpufleet.node.profiles import AUTO, INVENTORY_VARIABLE, Profile
from gpufleet.node.profiles.profile_match import SET_HINT
from gpufleet.results import Record, Status

IB_NOT_COMPARED = "HCA ports not compared: the recording has no infiniband section"
_RANK: dict[str, int] = {"pass": 0, "skip": 0, "warn": 1, "incomplete": 2, "fail": 3}


def how_chosen(requested: str) -> str:
    """``detected`` for ``auto`` (or empty), ``named`` for a profile name."""
    return "detected" if requested.strip() in ("", AUTO) else "named"


def finding_text(finding: Record) -> str:
    """A finding's message without its ``Fix:`` tail: "GPU 1 (...): active NVLinks: expected
    18, found 17 (...)"."""
    return finding.message.removesuffix(f" Fix: {finding.remedy}").rstrip(".")


def system_profile(
    profile: Profile, requested: str, findings: Sequence[Record], ib_compared: bool = True
) -> Record:
    """The check's record from the diff's ``findings``: pass when there is none, else the
    worst finding's status with every finding listed."""
    about = f"profile {profile.name} ({profile.title}, {how_chosen(requested)})"
    note = "" if ib_compared else f"; {IB_NOT_COMPARED}"
    if not findings:
        return rec(
            names.SYSTEM_PROFILE, "pass", f"matches {about}{note}",
            value="matches", threshold=profile.name,
        )  # fmt: skip
    worst: Status = max((f.status for f in findings), key=lambda s: _RANK.get(s, 3))
    listed = "; ".join(f"[{f.name}] {finding_text(f)}" for f in findings)
    remedies = dict.fromkeys(f"{f.name}: {f.remedy}" for f in findings if f.remedy)
    return rec(
        names.SYSTEM_PROFILE,
        worst,
        f"{len(findings)} field(s) differ from {about}: {listed}{note}.",
        value=f"{len(findings)} field(s) differ",
        threshold=profile.name,
        remedy="; ".join(remedies),
    )


def profile_unresolved(requested: str, error: GpufleetError) -> Record:
    """No profile to judge against: an unknown name, a node auto detection cannot place
    (gpufleet.node.profiles.ProfileError) or a profile file that cannot be read."""
    text = str(error)
    return Record(
        name=names.SYSTEM_PROFILE,
        status="fail",
        value=requested or AUTO,
        threshold="a known system profile",
        remedy=SET_HINT,
        message=text if "Fix:" in text else f"{text}. Fix: {SET_HINT}",
    )


def profile_meta(
    requested: str,
    profile: Profile | None,
    findings: Sequence[Record] = (),
    ib_compared: bool = True,
    error: str = "",
) -> dict[str, Any]:
    """What the result file's ``meta["profile"]`` holds: the profile chosen (None when none
    could be), how, and each finding with its expected and found value."""
    return {
        "requested": requested or AUTO,
        "name": None if profile is None else profile.name,
        "how": how_chosen(requested),
        "variable": INVENTORY_VARIABLE,
        "ib_compared": ib_compared,
        "error": error,
        "findings": [
            {
                "name": f.name,
                "status": f.status,
                "gpu": f.gpu,
                "expected": f.threshold,
                "found": f.value,
                "text": finding_text(f),
            }
            for f in findings
        ],
    }
