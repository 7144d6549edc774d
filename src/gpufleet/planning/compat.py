"""Load and validate data/compat.json, the single compatibility table.

Everything version-related (planner, Ansible filter, checks, README matrix) reads these
objects; nothing else in the project holds a version table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpufleet.planning import versions as V

CONFIDENCE = ("confirmed", "secondary", "unconfirmed")


class CompatDataError(ValueError):
    """The data file is inconsistent (a bug in the data, caught by the tests)."""


@dataclass(frozen=True)
class Family:
    name: str
    majors: tuple[int, ...]
    codenames: dict[str, str]
    last_branch: int | None
    source: str


@dataclass(frozen=True)
class ArchSet:
    key: str
    sass: tuple[str, ...]
    ptx: str | None
    source: str

    @property
    def arch_list(self) -> tuple[str, ...]:
        """The set as ``torch.cuda.get_arch_list()`` writes it: sm_80, ..., compute_90."""
        names = [f"sm_{s.replace('.', '')}" for s in self.sass]
        if self.ptx is not None:
            names.append(f"compute_{self.ptx.replace('.', '')}")
        return tuple(names)


@dataclass(frozen=True)
class Cuda:
    version: str
    ga_driver: str
    floor: str
    removes: tuple[str, ...]
    source: str

    @property
    def toolkit_package(self) -> str:
        return "cuda-toolkit-" + self.version.replace(".", "-")

    @property
    def toolkit_prefix(self) -> str:
        return f"/usr/local/cuda-{self.version}"

    @property
    def ga_branch(self) -> int:
        return V.driver_branch(self.ga_driver)

    @cached_property
    def version_v(self) -> V.Version:
        return V.parse(self.version)

    @cached_property
    def floor_v(self) -> V.Version:
        """The minor-version-compatibility driver floor, parsed."""
        return V.parse(self.floor)

    @cached_property
    def ga_driver_v(self) -> V.Version:
        return V.parse(self.ga_driver)


@dataclass(frozen=True)
class El:
    major: int
    glibc: str
    repo: str
    supported: bool
    cuda_max: str | None
    cuda_min: str | None
    branch_max: int | None
    why_unsupported: str
    source: str

    @cached_property
    def glibc_v(self) -> V.Version:
        return V.parse(self.glibc)

    @cached_property
    def cuda_max_v(self) -> V.Version | None:
        return V.parse(self.cuda_max) if self.cuda_max else None

    @cached_property
    def cuda_min_v(self) -> V.Version | None:
        return V.parse(self.cuda_min) if self.cuda_min else None


@dataclass(frozen=True)
class Variant:
    name: str  # cu126 / cpu
    archs: ArchSet | None  # None for cpu
    confidence: str
    since: str | None  # first patch release carrying it
    nccl: str | None
    note: str

    @property
    def cuda(self) -> str | None:
        return V.variant_cuda(self.name)


@dataclass(frozen=True)
class TorchRelease:
    minor: str
    released: str
    patches: tuple[str, ...]
    default: str
    python: tuple[str, str]
    glibc: str
    nccl: str
    variants: dict[str, Variant]
    source: str

    @property
    def latest(self) -> str:
        return self.patches[-1]

    @cached_property
    def python_v(self) -> tuple[V.Version, V.Version]:
        """The (lowest, highest) Python minor the release publishes wheels for, parsed."""
        return V.parse(self.python[0]), V.parse(self.python[1])

    @cached_property
    def glibc_v(self) -> V.Version:
        return V.parse(self.glibc)

    def variants_for(self, patch: str) -> list[Variant]:
        """Variants published for this exact patch release (cpu excluded), newest CUDA last."""
        out = [
            v
            for v in self.variants.values()
            if v.since is None or V.at_least(V.parse(patch), V.parse(v.since))
        ]
        return sorted(out, key=lambda v: V.parse(v.cuda or "0"))


@dataclass(frozen=True)
class Policy:
    recommended_min_branch: int
    recommended_min_branch_why: str
    open_modules_min_branch: int
    open_modules_min_cc: str


@dataclass(frozen=True)
class CompatData:
    compiled: str
    sources: dict[str, str]
    index_base: str
    policy: Policy
    families: tuple[Family, ...]
    arch_sets: dict[str, ArchSet]
    cuda: dict[str, Cuda]
    el: dict[int, El]
    torch: tuple[TorchRelease, ...]  # oldest first

    def release(self, minor: str) -> TorchRelease | None:
        for rel in self.torch:
            if rel.minor == minor:
                return rel
        return None

    def index_url(self, variant: str) -> str:
        return f"{self.index_base}/{variant}"


def _variant(name: str, raw: dict[str, Any], arch_sets: dict[str, ArchSet], where: str) -> Variant:
    conf = raw.get("confidence", "confirmed")
    if conf not in CONFIDENCE:
        raise CompatDataError(f"{where}: confidence {conf!r} not in {CONFIDENCE}")
    key = raw["archs"]
    if key not in arch_sets:
        raise CompatDataError(f"{where}: unknown arch set {key!r}")
    return Variant(
        name=name,
        archs=arch_sets[key],
        confidence=conf,
        since=raw.get("since"),
        nccl=raw.get("nccl"),
        note=raw.get("note", ""),
    )


def parse_data(doc: dict[str, Any]) -> CompatData:
    """Build and cross-check the objects; raises CompatDataError on inconsistencies."""
    if doc.get("schema") != 1:
        raise CompatDataError(f"unsupported compat schema {doc.get('schema')!r}")
    arch_sets = {
        k: ArchSet(k, tuple(v["sass"]), v.get("ptx"), v["source"])
        for k, v in doc["arch_sets"].items()
    }
    cuda = {
        c["version"]: Cuda(
            c["version"], c["ga_driver"], c["floor"], tuple(c["removes"]), c["source"]
        )
        for c in doc["cuda"]
    }
    el = {
        e["major"]: El(
            major=e["major"],
            glibc=e["glibc"],
            repo=e["repo"],
            supported=e["supported"],
            cuda_max=e.get("cuda_max"),
            cuda_min=e.get("cuda_min"),
            branch_max=e.get("branch_max"),
            why_unsupported=e.get("why_unsupported", ""),
            source=e["source"],
        )
        for e in doc["el"]
    }
    families = tuple(
        Family(
            f["name"],
            tuple(f["majors"]),
            dict(f["codenames"]),
            f["last_branch"],
            f["source"],
        )
        for f in doc["families"]
    )
    releases: list[TorchRelease] = []
    for t in doc["torch"]:
        where = f"torch {t['minor']}"
        variants = {
            n: _variant(n, raw, arch_sets, f"{where} {n}") for n, raw in t["variants"].items()
        }
        for v in variants.values():
            if v.cuda not in cuda:
                raise CompatDataError(f"{where}: variant {v.name} has no CUDA {v.cuda} row")
        if t["default"] not in variants:
            raise CompatDataError(f"{where}: default {t['default']} is not among its variants")
        for p in t["patches"]:
            if V.torch_minor(p) != t["minor"]:
                raise CompatDataError(f"{where}: patch {p} does not belong to it")
        releases.append(
            TorchRelease(
                minor=t["minor"],
                released=t["released"],
                patches=tuple(t["patches"]),
                default=t["default"],
                python=(t["python"][0], t["python"][1]),
                glibc=t["glibc"],
                nccl=t["nccl"],
                variants=variants,
                source=t["source"],
            )
        )
    releases.sort(key=lambda r: V.parse(r.minor))
    pol = doc["policy"]
    return CompatData(
        compiled=doc["compiled"],
        sources=dict(doc["sources"]),
        index_base=doc["wheel_index"]["base"].rstrip("/"),
        policy=Policy(
            pol["recommended_min_branch"],
            pol["recommended_min_branch_why"],
            pol["open_modules_min_branch"],
            pol["open_modules_min_cc"],
        ),
        families=families,
        arch_sets=arch_sets,
        cuda=cuda,
        el=el,
        torch=tuple(releases),
    )


@lru_cache(maxsize=4)
def load(path: str | None = None) -> CompatData:
    """The packaged table (or another file, for tests and for users who extend it)."""
    if path is None:
        text = resources.files("gpufleet").joinpath("data/compat.json").read_text("utf-8")
    else:
        text = Path(path).read_text(encoding="utf-8")
    return parse_data(json.loads(text))
