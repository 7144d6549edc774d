"""Which profile a node is judged against: the one named for the host, or detected.

The inventory names it per host (``gpufleet_system_profile``, default ``auto``). Under
``auto`` the NVML product names decide: the profile listing the names of the most GPUs
wins, and among profiles that tie, the one whose GPU count equals the node's. A node whose
GPU count differs from its only matching profile still gets that profile, so a missing GPU
is a finding of the diff, never an "unknown system". A node where NVML finds no GPU maps to
the profile expecting none (the simulated CPU node), unless the PCI bus lists NVIDIA GPUs:
then the driver is the problem, and auto refuses rather than call a GPU node a CPU node.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.errors import RefusedError
from gpufleet.inputs.profile_file import Profile, load_profiles
from gpufleet.node.nvml import NodeReading

AUTO = "auto"
#: The inventory variable that names a host's profile.
INVENTORY_VARIABLE = "gpufleet_system_profile"
SET_HINT = (
    f"set {INVENTORY_VARIABLE}: <profile> for this host in the inventory (host_vars or "
    "hosts.yml), or pass the name (`gpufleet profile diff --profile NAME`, the checks "
    "suite's --system-profile NAME); `gpufleet profile show` lists the profiles and "
    "docs/profiles.md says how to add one"
)


class ProfileError(RefusedError):
    """No usable profile: an unknown name, or a node that auto detection cannot place."""


def known(profiles: Mapping[str, Profile]) -> str:
    return ", ".join(sorted(profiles))


def lookup(name: str, profiles: Mapping[str, Profile]) -> Profile:
    """The profile called ``name``; :class:`ProfileError` listing the known ones if none."""
    try:
        return profiles[name]
    except KeyError:
        raise ProfileError(
            f"unknown system profile {name!r} (known: {known(profiles)}, or {AUTO}). "
            f"Fix: {SET_HINT}."
        ) from None


def _found_names(snapshot: NodeReading) -> list[str]:
    return [g.name for g in snapshot.gpus if g.error is None and g.name]


def detect(
    snapshot: NodeReading,
    profiles: Mapping[str, Profile] | None = None,
    pci_gpus: int | None = None,
) -> Profile:
    """The profile of this node from its NVML product names and GPU count.

    ``pci_gpus``: NVIDIA GPUs on the PCI bus (the recording's ``pci_nvidia_gpus``), used to
    tell a CPU node from a GPU node whose driver is not working.
    """
    profiles = load_profiles() if profiles is None else profiles
    # a site profile that extends another stands for it: its nodes are the site's variant
    extended = {p.extends for p in profiles.values() if p.extends}
    profiles = {n: p for n, p in profiles.items() if n not in extended}
    count = len(snapshot.gpus)
    if count == 0:
        if pci_gpus:
            raise ProfileError(
                f"NVML finds no GPU but the PCI bus lists {pci_gpus} NVIDIA GPU(s): the "
                "driver is missing or not loaded, so auto detection cannot tell which system "
                "this is. Fix: install/load the driver (`gpufleet health` says what is "
                f"wrong), or {SET_HINT}."
            )
        cpu = [p for p in profiles.values() if p.gpu_count == 0]
        if len(cpu) == 1:
            return cpu[0]
        raise ProfileError(
            f"no GPU on this node and {len(cpu)} profiles expect none ({known(profiles)}). "
            f"Fix: {SET_HINT}."
        )
    names = _found_names(snapshot)
    if not names:
        raise ProfileError(
            f"none of the {count} GPU(s) NVML enumerates could be read (no product name), so "
            f"auto detection cannot tell which system this is. Fix: {SET_HINT}."
        )
    score = {p.name: sum(n in p.gpu_names for n in names) for p in profiles.values()}
    best = max(score.values())
    if best == 0:
        found = ", ".join(sorted(set(names)))
        raise ProfileError(
            f"no profile lists the GPU model(s) of this node: {found} ({count} GPU(s)); "
            f"known profiles: {known(profiles)}. Fix: {SET_HINT}."
        )
    tied = [profiles[n] for n in sorted(score) if score[n] == best]
    exact = [p for p in tied if p.gpu_count == count]
    chosen = exact if exact else tied
    if len(chosen) == 1:
        return chosen[0]
    raise ProfileError(
        f"{len(chosen)} profiles fit this node's {count} GPU(s) ({', '.join(sorted(set(names)))}) "
        f"equally: {', '.join(p.name for p in chosen)}. Fix: {SET_HINT}."
    )


def select(
    name: str,
    snapshot: NodeReading,
    profiles: Mapping[str, Profile] | None = None,
    pci_gpus: int | None = None,
) -> Profile:
    """The profile named for the host, or the detected one when the name is ``auto``."""
    profiles = load_profiles() if profiles is None else profiles
    wanted = name.strip()
    if wanted in ("", AUTO):
        return detect(snapshot, profiles, pci_gpus)
    return lookup(wanted, profiles)


def select_here(name: str, profiles_dir: str | None = None) -> Profile:
    """:func:`select` on this node: NVML read now (a node without a driver reads as no GPU),
    the shipped profiles and the site's (``profiles_dir``), the GPUs on PCI. What the node
    commands that judge against a profile (``gpufleet compute``, ``gpufleet ibbw``) call;
    a :class:`~gpufleet.errors.GpufleetError` says why none could be chosen."""
    from gpufleet.node import facts, nvml  # noqa: PLC0415  (NVML only when asked)

    try:
        with nvml.open_reader() as reader:
            reading = reader.read()
    except nvml.NvmlUnavailable as exc:
        if not exc.no_driver:
            raise
        reading = nvml.NodeReading(driver_version="", cuda_driver_version=None, gpus=())
    loaded = load_profiles(site_dir=profiles_dir or None)
    return select(name, reading, loaded, facts.pci_nvidia_gpus())
