"""Load and validate the per-system hardware profiles (``data/profiles/<name>.json``) and a
site's own profile files (``gpufleet_profiles_dir``, ``--profiles-dir``).

A profile states what one system type is when it is healthy: the GPU model NVML names, how
many GPUs and how much memory each, NVLinks per GPU, the PCIe link, NVSwitch / Fabric
Manager, the InfiniBand/RoCE ports and their rate, floors (bandwidth, matmul TFLOP/s), the
tolerances of the relative judgements, and optional version pins. Every figure is an object
``{"value": ..., "source": URL, "note": ...}``: a value carries its source; ``null`` carries
a note saying why there is no figure; a floor's ``unit`` is the one its field is measured in.
A file that breaks these rules is refused with its path and the field (docs/profiles.md).

A site profile file is either a whole profile (a new system type, or a shipped name it
replaces) or ``"extends": "<profile>"`` with only the fields the site states differently
(12 of 18 NVLinks by design, its own measured floors), each with its own source. A profile
that extends another takes its place when a node's profile is detected. The site's files
are read after the shipped ones; the first file that breaks a rule stops the load, named as
the site wrote its directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.errors import GpufleetError

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+; the package runs on 3.10 too
    from importlib.resources.abc import Traversable

SCHEMA = 1
#: Where the shipped profiles live inside the package.
PROFILE_DIR = "data/profiles"

FIGURE_KEYS = frozenset({"value", "source", "note", "unit", "message_bytes"})
TOP_KEYS = frozenset(
    {"schema", "name", "title", "summary", "gpu", "nvswitch", "fabric_manager", "network",
     "floors", "tolerances", "pins"}
)  # fmt: skip
#: a site file may also name the profile it changes (never a shipped one: they are whole)
EXTENDS = "extends"
#: the sections a site file that extends a profile changes field by field
SECTIONS = ("gpu", "network", "floors", "tolerances", "pins")
GPU_FIELDS = ("nvml_names", "count", "memory_gb", "nvlink_links", "pcie_generation", "pcie_width")
NETWORK_FIELDS = ("link_layer", "ports", "rate_gbps")
#: every floor and the unit it is stated in (a figure in another unit is refused: a site's
#: "375" in GB/s where Gb/s is meant would pass every node)
FLOOR_UNITS: Mapping[str, str] = {
    "allreduce_busbw_gbs": "GB/s",
    "cross_node_busbw_per_nic_gbs": "GB/s",
    "host_device_copy_gbs": "GB/s",
    "ib_write_bw_gdr_gbps": "Gb/s",
    # dense bf16 matmul per GPU (gpufleet.node.compute)
    "matmul_bf16_tflops": "TFLOP/s",
    # the collectives beside all-reduce on one node, all of the profile's GPUs
    # (gpufleet.verify.collective_ops; busbw by nccl-tests' factor of each)
    "all_gather_busbw_gbs": "GB/s",
    "reduce_scatter_busbw_gbs": "GB/s",
    "alltoall_busbw_gbs": "GB/s",
    "broadcast_busbw_gbs": "GB/s",
    "sendrecv_busbw_gbs": "GB/s",
}
FLOOR_FIELDS = tuple(FLOOR_UNITS)
#: the relative judgements' tolerances, fractions in (0, 1): a GPU more than
#: gpu_spread_fraction below the best GPU of its node fails; a GPU whose matmul figure falls
#: by more than burnin_drop_fraction over a burn-in fails
TOLERANCE_FIELDS = ("gpu_spread_fraction", "burnin_drop_fraction")
PIN_FIELDS = ("driver_branch", "vbios", "fabric_manager_version", "hca_firmware")
LINK_LAYERS = ("InfiniBand", "Ethernet")


class ProfileFileError(GpufleetError):
    """A profile file that cannot be used: names the file and the field."""

    def __init__(self, path: str, field_name: str, problem: str) -> None:
        self.path = path
        self.field = field_name
        super().__init__(
            f"profile {path}: field {field_name}: {problem}. Fix the file "
            "(docs/profiles.md, 'Adding a profile' and 'Site profiles', say what each field "
            "holds)."
        )


@dataclass(frozen=True)
class Figure:
    """One stated figure: its value (None: no public figure, see ``note``) and source."""

    value: Any
    source: str = ""
    note: str = ""
    unit: str = ""
    message_bytes: int | None = None


@dataclass(frozen=True)
class Profile:
    """One system type, as the diff uses it. ``None``: the profile does not judge that field."""

    name: str
    title: str
    summary: str
    path: str
    gpu_names: tuple[str, ...]
    gpu_count: int
    memory_gb: float | None
    nvlink_links: int | None  # 0: no NVLink expected
    pcie_generation: int | None
    pcie_width: int | None
    nvswitch: bool | None
    fabric_manager: bool | None
    ib_link_layer: str | None
    ib_ports: int | None
    ib_rate_gbps: float | None
    pins: Mapping[str, str | None]
    #: Every figure by its dotted field name ("gpu.count", "floors.allreduce_busbw_gbs").
    figures: Mapping[str, Figure] = field(default_factory=dict)
    #: the profile a site file extends ("" for a whole profile); "shipped" or "site"
    extends: str = ""
    origin: str = "shipped"

    def floor(self, name: str) -> Figure:
        return self.figures[f"floors.{name}"]

    def tolerance(self, name: str) -> Figure:
        return self.figures[f"tolerances.{name}"]


# ------------------------------------------------------------------------------ checks


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(n, str) and n.strip() for n in v)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _link_layer(v: Any) -> bool:
    return v in LINK_LAYERS


def _fraction(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1


Check = tuple[Callable[[Any], bool], str]
COUNT: Check = (_count, "a whole number >= 0")
POSITIVE: Check = (_positive, "a number > 0")
NAMES: Check = (_names, "a list of NVML product names (non-empty strings)")
BOOL: Check = (_bool, "true or false")
LAYER: Check = (_link_layer, f"one of {', '.join(LINK_LAYERS)}")
FRACTION: Check = (_fraction, "a fraction between 0 and 1 (0.1 = 10 %)")

GPU_CHECKS: Mapping[str, Check] = {
    "nvml_names": NAMES,
    "count": COUNT,
    "memory_gb": POSITIVE,
    "nvlink_links": COUNT,
    "pcie_generation": POSITIVE,
    "pcie_width": POSITIVE,
}
NETWORK_CHECKS: Mapping[str, Check] = {"link_layer": LAYER, "ports": COUNT, "rate_gbps": POSITIVE}


class _Reader:
    """Reads one profile's JSON, refusing the first field that breaks the rules."""

    def __init__(self, path: str, data: Any) -> None:
        self.path = path
        if not isinstance(data, dict):
            self.fail("(top)", "the file must hold one JSON object")
        self.data: dict[str, Any] = data
        self.figures: dict[str, Figure] = {}

    def fail(self, field_name: str, problem: str) -> None:
        raise ProfileFileError(self.path, field_name, problem)

    def section(self, name: str, fields: Iterable[str]) -> dict[str, Any]:
        raw = self.data.get(name)
        if not isinstance(raw, dict):
            self.fail(name, "missing, or not an object")
        assert isinstance(raw, dict)
        wanted = list(fields)
        for key in wanted:
            if key not in raw:
                self.fail(f"{name}.{key}", "missing")
        extra = sorted(set(raw) - set(wanted) - {"note"})
        if extra:
            self.fail(f"{name}.{extra[0]}", f"unknown field (known: {', '.join(wanted)})")
        return raw

    def figure(self, dotted: str, raw: Any, check: Check, *, nullable: bool = True) -> Any:
        if not isinstance(raw, dict) or "value" not in raw:
            self.fail(dotted, 'not a figure: expected {"value": ..., "source": URL}')
        extra = sorted(set(raw) - FIGURE_KEYS)
        if extra:
            self.fail(
                f"{dotted}.{extra[0]}", f"unknown key (known: {', '.join(sorted(FIGURE_KEYS))})"
            )
        value, source, note = raw["value"], raw.get("source", ""), raw.get("note", "")
        if not isinstance(source, str) or not isinstance(note, str):
            self.fail(dotted, "source and note must be strings")
        if value is None:
            if not nullable:
                self.fail(f"{dotted}.value", "must be set")
            if not note.strip():
                self.fail(
                    f"{dotted}.note", "a null value needs a note saying why there is no figure"
                )
        else:
            if not check[0](value):
                self.fail(f"{dotted}.value", f"expected {check[1]}, got {value!r}")
            if not source.strip():
                self.fail(f"{dotted}.source", "a figure needs its public source (URL)")
        message_bytes = raw.get("message_bytes")
        if message_bytes is not None and not _positive(message_bytes):
            self.fail(f"{dotted}.message_bytes", f"expected a number > 0, got {message_bytes!r}")
        unit = raw.get("unit", "")
        if not isinstance(unit, str):
            self.fail(f"{dotted}.unit", f"expected a string, got {unit!r}")
        self.figures[dotted] = Figure(value, source, note, unit, message_bytes)
        return value

    def text(self, key: str) -> str:
        value = self.data.get(key)
        if not isinstance(value, str) or not value.strip():
            self.fail(key, "missing, or not a non-empty string")
        return str(value)


def parse_profile(data: Any, path: str, *, extends: str = "", origin: str = "shipped") -> Profile:
    """A :class:`Profile` from the parsed JSON of ``path``; :class:`ProfileFileError` if bad.
    ``extends``/``origin``: what :func:`load_profiles` merged it from (a site file)."""
    r = _Reader(path, data)
    if r.data.get("schema") != SCHEMA:
        r.fail("schema", f"expected {SCHEMA}, got {r.data.get('schema')!r}")
    unknown = sorted(set(r.data) - TOP_KEYS)
    if unknown:
        r.fail(unknown[0], f"unknown field (known: {', '.join(sorted(TOP_KEYS))})")
    name = r.text("name")
    stem = Path(path).stem
    if path.endswith(".json") and name != stem:
        r.fail("name", f"{name!r} differs from the file name {stem!r}")
    gpu = r.section("gpu", GPU_FIELDS)
    g = {k: r.figure(f"gpu.{k}", gpu[k], c, nullable=k not in ("nvml_names", "count"))
         for k, c in GPU_CHECKS.items()}  # fmt: skip
    if (g["count"] == 0) != (not g["nvml_names"]):
        r.fail("gpu.nvml_names", "list the GPU's NVML names exactly when gpu.count is above 0")
    nvswitch = r.figure("nvswitch", r.data.get("nvswitch"), BOOL)
    fabric_manager = r.figure("fabric_manager", r.data.get("fabric_manager"), BOOL)
    net = r.section("network", NETWORK_FIELDS)
    n = {k: r.figure(f"network.{k}", net[k], c) for k, c in NETWORK_CHECKS.items()}
    if n["ports"] and (n["rate_gbps"] is None or n["link_layer"] is None):
        r.fail("network.rate_gbps", "ports above 0 need rate_gbps and link_layer")
    floors = r.section("floors", FLOOR_FIELDS)
    for key, unit in FLOOR_UNITS.items():
        r.figure(f"floors.{key}", floors[key], POSITIVE)
        if r.figures[f"floors.{key}"].unit != unit:
            r.fail(
                f"floors.{key}.unit",
                f"expected {unit!r} (the unit this floor is measured in), "
                f"got {r.figures[f'floors.{key}'].unit!r}",
            )
    tolerances = r.section("tolerances", TOLERANCE_FIELDS)
    for key in TOLERANCE_FIELDS:
        r.figure(f"tolerances.{key}", tolerances[key], FRACTION, nullable=False)
    pins = r.section("pins", PIN_FIELDS)
    for key in PIN_FIELDS:
        if pins[key] is not None and not (isinstance(pins[key], str) and pins[key].strip()):
            r.fail(f"pins.{key}", f"expected null (unset) or a version string, got {pins[key]!r}")
    return Profile(
        name=name,
        title=r.text("title"),
        summary=r.text("summary"),
        path=path,
        gpu_names=tuple(g["nvml_names"]),
        gpu_count=int(g["count"]),
        memory_gb=g["memory_gb"],
        nvlink_links=g["nvlink_links"],
        pcie_generation=g["pcie_generation"],
        pcie_width=g["pcie_width"],
        nvswitch=nvswitch,
        fabric_manager=fabric_manager,
        ib_link_layer=n["link_layer"],
        ib_ports=n["ports"],
        ib_rate_gbps=None if n["rate_gbps"] is None else float(n["rate_gbps"]),
        pins={k: pins[k] for k in PIN_FIELDS},
        figures=dict(r.figures),
        extends=extends,
        origin=origin,
    )


def _read_json(entry: Path | Traversable, where: str) -> Any:
    try:
        return json.loads(entry.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileFileError(where, f"(line {exc.lineno})", f"not valid JSON: {exc.msg}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileFileError(where, "(file)", f"cannot read it ({exc})") from exc


def load_profile(path: str | Path) -> Profile:
    """One profile file."""
    return parse_profile(_read_json(Path(path), str(path)), str(path))


def builtin_dir() -> Traversable:
    """The profiles shipped in the package (src/gpufleet/data/profiles)."""
    return resources.files("gpufleet").joinpath(PROFILE_DIR)


def merge(base: Mapping[str, Any], site: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` (a whole profile's JSON) with what the site file states: its top-level
    fields, and each field of a section it names (the rest of the section stays the base's)."""
    out = dict(base)
    for key, value in site.items():
        if key == EXTENDS:
            continue
        if key in SECTIONS and isinstance(value, dict) and isinstance(base.get(key), dict):
            out[key] = {**base[key], **value}
        else:
            out[key] = value
    return out


def _json_files(root: Path | Traversable) -> list[Path | Traversable]:
    return sorted((e for e in root.iterdir() if e.name.endswith(".json")), key=lambda e: e.name)


def load_profiles(
    directory: str | Path | None = None, site_dir: str | Path | None = None
) -> dict[str, Profile]:
    """Every ``*.json`` profile of ``directory`` (default: the shipped ones), by name; then
    the site's files of ``site_dir`` (``gpufleet_profiles_dir``), each a whole profile or one
    that ``extends`` a profile loaded before it (paths in errors as ``site_dir`` was written)."""
    root: Path | Traversable = builtin_dir() if directory is None else Path(directory)
    found: dict[str, Profile] = {}
    raw: dict[str, Any] = {}
    for entry in _json_files(root):
        where = str(entry) if directory is not None else f"{PROFILE_DIR}/{entry.name}"
        data = _read_json(entry, where)
        profile = parse_profile(data, where)
        found[profile.name], raw[profile.name] = profile, data
    if not found:
        raise ProfileFileError(str(root), "(directory)", "holds no *.json profile")
    if site_dir is None or str(site_dir) == "":
        return found
    site = Path(site_dir)
    if not site.is_dir():
        raise ProfileFileError(str(site_dir), "(directory)", "does not exist or is not a directory")
    files = _json_files(site)
    if not files:
        raise ProfileFileError(str(site_dir), "(directory)", "holds no *.json profile")
    for entry in files:
        where = str(Path(str(site_dir)) / entry.name)
        data = _read_json(entry, where)
        base = data.get(EXTENDS) if isinstance(data, dict) else None
        if base is None:
            profile = parse_profile(data, where, origin="site")
        else:
            if not isinstance(base, str) or base not in raw:
                raise ProfileFileError(
                    where, EXTENDS, f"{base!r} is no profile known before this file "
                    f"(known: {', '.join(sorted(raw))})"
                )  # fmt: skip
            for key in SECTIONS:
                if key in data and not isinstance(data[key], dict):
                    raise ProfileFileError(where, key, "not an object")
            merged = merge(raw[base], data)
            profile = parse_profile(merged, where, extends=base, origin="site")
            data = merged
        found[profile.name], raw[profile.name] = profile, data
    return found
