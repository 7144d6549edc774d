"""``gpufleet profile show [NAME]`` and ``gpufleet profile diff``: the per-system hardware
profiles (src/gpufleet/data/profiles, docs/profiles.md) and a node against its profile.

``show`` without a name lists the profiles; with one it prints the profile's figures, each
with its source. ``diff`` reads this node (NVML, /sys/class/infiniband) or a recording
(``--nvml-recording FILE``, from ``gpufleet nvml record --full``) and prints one finding
per field that differs from the profile: ``--profile NAME`` (the host's
``gpufleet_system_profile``), default ``auto`` (detected from the GPUs' NVML product
names). Both read a site's own profile files after the shipped ones with ``--profiles-dir
DIR`` (the inventory's ``gpufleet_profiles_dir``; docs/profiles.md, "Site profiles"): a file
that breaks a rule is refused (exit 2) naming the file and the field. Exit 0 when nothing
fails (warnings allowed), 1 when a finding fails or NVML is broken, 2 for an unknown profile,
a bad site file or a node auto detection cannot place (set the profile)."""

# ruff: noqa: PLC0415  (NVML is imported lazily on purpose)

from __future__ import annotations

import argparse
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import CheckFailed, RefusedError
from gpufleet.node import profiles as prof
from gpufleet.results import Record, ResultFile, exit_code, utc_stamp

SUBCOMMANDS = ("show", "diff")


def register(sub: Any) -> None:
    p = add_command(sub, "profile", "per-system hardware profiles and a node's diff", __doc__)
    s = p.add_subparsers(dest="profile_cmd", metavar="SUBCOMMAND", required=True)
    show = s.add_parser("show", help="list the profiles, or print one with its sources")
    show.add_argument("name", nargs="?", type=argtypes.text, help="profile name")
    _site_option(show)
    show.set_defaults(func=run_show)
    d = s.add_parser("diff", help="diff this node (or a recording) against its profile")
    d.add_argument(
        "--profile", type=argtypes.text, default=prof.AUTO,
        help="profile name, or auto (default): detect from the GPUs' NVML product names",
    )  # fmt: skip
    d.add_argument("--nvml-recording", type=argtypes.text, metavar="FILE", default=None)
    d.add_argument(
        "--ib-sysfs", type=argtypes.text, metavar="DIR", default=None,
        help="read HCA ports from DIR (default: the recording's infiniband section, or "
        "/sys/class/infiniband on this node)",
    )  # fmt: skip
    d.add_argument("--json", type=argtypes.text, metavar="FILE", default=None,
                   help="also write the findings as a result file (kind profile)")  # fmt: skip
    _site_option(d)
    d.set_defaults(func=run_diff)


def _site_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--profiles-dir", type=argtypes.text, metavar="DIR", default=None,
        help="a site's own profile files, read after the shipped ones (gpufleet_profiles_dir)",
    )  # fmt: skip


def _load(args: argparse.Namespace) -> dict[str, prof.Profile]:
    """The shipped profiles and the site's (``--profiles-dir``); a bad site file is refused."""
    try:
        return prof.load_profiles(site_dir=args.profiles_dir or None)
    except prof.ProfileFileError as exc:
        if args.profiles_dir:
            raise RefusedError(f"--profiles-dir {args.profiles_dir}: {exc}") from exc
        raise


# ------------------------------------------------------------------------------ show


def _value(fig: prof.Figure) -> str:
    if fig.value is None:
        return "null"
    value = ", ".join(fig.value) if isinstance(fig.value, list) else str(fig.value)
    size = f" at {fig.message_bytes / 2**30:g} GiB" if fig.message_bytes else ""
    return f"{value}{' ' + fig.unit if fig.unit else ''}{size}"


def render_profile(p: prof.Profile) -> str:
    origin = (
        f" (site, extends {p.extends})" if p.extends else " (site)" if p.origin == "site" else ""
    )
    lines = [f"{p.name}: {p.title}", f"  {p.summary}", f"  file: {p.path}{origin}", ""]
    for dotted, fig in p.figures.items():
        lines.append(f"  {dotted:34} {_value(fig)}")
        if fig.source:
            lines.append(f"  {'':34} source: {fig.source}")
        if fig.note:
            lines.append(f"  {'':34} note: {fig.note}")
    pins = ", ".join(f"{k}={v}" for k, v in p.pins.items() if v) or "none set"
    lines.append(f"  {'pins':34} {pins}")
    return "\n".join(lines) + "\n"


def run_show(args: argparse.Namespace) -> int:
    profiles = _load(args)
    if args.name:
        sys.stdout.write(render_profile(prof.lookup(args.name, profiles)))
        return 0
    width = max(len(n) for n in profiles)
    for name, p in sorted(profiles.items()):
        gpus = f"{p.gpu_count}x {' / '.join(p.gpu_names)}" if p.gpu_count else "no GPU"
        sys.stdout.write(f"{name:{width}}  {p.title} ({gpus})\n")
    sys.stdout.write(
        f"\nSet one per host with {prof.INVENTORY_VARIABLE} (default {prof.AUTO}); "
        "`gpufleet profile show NAME` prints its figures and sources.\n"
    )
    return 0


# ------------------------------------------------------------------------------ diff


def _read_node(recording: str | None) -> tuple[Any, dict[str, Any] | None, int | None, str]:
    """(NodeReading, raw infiniband section or None, NVIDIA GPUs on the PCI bus, node name)."""
    from gpufleet.node import nvml

    rec: dict[str, Any] = {}
    if recording is not None:
        rec = nvml.load_recording(recording)
        reader: nvml.NvmlReader = nvml.RecordedReader(rec)
        node = str(rec.get("node") or Path(recording).stem)
    else:
        reader = nvml.PynvmlReader()
        node = socket.gethostname()
    try:
        reading = reader.read()
    except nvml.NvmlUnavailable as exc:
        if not exc.no_driver:
            raise CheckFailed(f"{exc}. Fix: {exc.remedy}") from exc
        reading = nvml.NodeReading(driver_version="", cuda_driver_version=None, gpus=())
    finally:
        if isinstance(reader, nvml.PynvmlReader):
            reader.close()
    if recording is not None:
        pci = rec.get("pci_nvidia_gpus")
        return reading, rec.get("infiniband"), None if pci is None else int(pci), node
    from gpufleet.node.facts import pci_nvidia_gpus
    from gpufleet.node.ib_ports import read_ib_sysfs

    return reading, read_ib_sysfs(), pci_nvidia_gpus(), node


def run_diff(args: argparse.Namespace) -> int:
    from gpufleet.node.ib_ports import ports_from_raw, read_ib_sysfs

    started = datetime.now(timezone.utc)
    reading, raw_ib, pci_gpus, node = _read_node(args.nvml_recording)
    if args.ib_sysfs is not None:
        if not Path(args.ib_sysfs).is_dir():
            raise RefusedError(
                f"--ib-sysfs {args.ib_sysfs}: not a directory (expected a tree like "
                "/sys/class/infiniband: <hca>/ports/<n>/{state,phys_state,link_layer,rate})"
            )
        raw_ib = read_ib_sysfs(Path(args.ib_sysfs))
    profiles = _load(args)
    profile = prof.select(args.profile, reading, profiles, pci_gpus)
    ports = None if raw_ib is None else ports_from_raw(raw_ib)
    records = prof.diff(profile, reading, ports, node=node)
    how = "detected" if args.profile.strip() in ("", prof.AUTO) else "named"
    out = [f"{node} against profile {profile.name} ({profile.title}, {how}): "]
    out[0] += f"{len(records)} finding(s)" if records else "no difference"
    out += [f"  {r.status.upper():5} {r.name}: {r.message}" for r in records]
    if ports is None:
        out.append(
            "  note: HCA ports not compared (the recording has no infiniband section; "
            "pass --ib-sysfs DIR)"
        )
    sys.stdout.write("\n".join(out) + "\n")
    if args.json:
        _write(args.json, node, profile, records, started, ports is not None)
    return exit_code(records)


def _write(
    path: str,
    node: str,
    profile: prof.Profile,
    records: list[Record],
    started: datetime,
    ib_compared: bool,
) -> None:
    ResultFile(
        kind="profile",
        node=node,
        mode="gpu" if profile.gpu_count else "cpu",
        started=utc_stamp(started),
        duration_s=(datetime.now(timezone.utc) - started).total_seconds(),
        records=records,
        meta={"profile": profile.name, "profile_file": profile.path, "ib_compared": ib_compared},
    ).write(path)
