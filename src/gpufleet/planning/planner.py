"""The planner: which torch wheel, CUDA toolkit and NVIDIA driver a node gets.

    plan = make_plan(PlanRequest(torch="2.11.0", driver="570.86.15"))

Inputs are validated first (malformed or unknown values are refused), then every wheel
variant the release publishes is judged against the node (GPU architectures, installed
driver, EL release, Python). The PyPI default wins when nothing forbids it; otherwise the
best remaining variant, with the reason. When nothing works the request is refused with
one paragraph naming the conflict and the nearest combinations that do work.

Only the standard library is imported here, so `gpufleet plan` answers fast.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from functools import cached_property
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.planning import versions as V
from gpufleet.planning.compat import CompatData, Cuda, TorchRelease, Variant, load
from gpufleet.planning.gpuarch import (
    CC,
    ArchError,
    cc_str,
    covers,
    family_of,
    open_modules_supported,
    parse_arch,
    sm,
)
from gpufleet.planning.osinfo import OsError, TargetOs, parse_os
from gpufleet.planning.wheel_sources import sources_for

CPU = "cpu"


class PlanRefused(RefusedError):
    """The requested combination cannot work. ``alternatives`` are pip-ready suggestions."""

    def __init__(self, message: str, alternatives: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.alternatives = list(alternatives)


@dataclass(frozen=True)
class PlanRequest:
    torch: str
    variant: str | None = None
    os: str | None = None
    driver: str | None = None
    gpu_archs: tuple[str, ...] = ()
    python: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | str) -> PlanRequest:
        """Build from loosely typed input (Ansible vars, JSON): the one normalisation.

        ``data`` is a mapping of :data:`REQUEST_FIELDS` or a bare torch version. Empty
        strings and None mean unset; ``gpu_archs`` is a list or one string split at commas
        and blanks. Raises RefusedError for unknown keys or a missing torch version.
        """
        if isinstance(data, str):
            data = {"torch": data}
        elif not isinstance(data, Mapping):
            raise RefusedError(
                f"plan input must be a mapping of {', '.join(REQUEST_FIELDS)} or a torch "
                f"version string, got {type(data).__name__}"
            )
        unknown = sorted(set(data) - set(REQUEST_FIELDS))
        if unknown:
            raise RefusedError(
                f"unknown input(s) {', '.join(map(str, unknown))}; known: "
                + ", ".join(REQUEST_FIELDS)
            )

        def opt(key: str) -> str | None:
            value = data.get(key)
            if value is None or (isinstance(value, str) and not value.strip()):
                return None
            return str(value).strip()

        archs = data.get("gpu_archs") or ()
        if isinstance(archs, str):
            archs = archs.replace(" ", ",").split(",")
        torch = opt("torch")
        if torch is None:
            raise RefusedError("torch version is required (gpufleet_torch_version / --torch)")
        return cls(
            torch=torch,
            variant=opt("variant"),
            os=opt("os"),
            driver=opt("driver"),
            gpu_archs=tuple(str(a).strip() for a in archs if str(a).strip()),
            python=opt("python"),
        )


#: The inputs of a plan request (the keys of the ``gpufleet.core.plan`` filter's mapping).
REQUEST_FIELDS = ("torch", "variant", "os", "driver", "gpu_archs", "python")


@dataclass(frozen=True)
class Plan:
    torch: str
    torch_minor: str
    variant: str
    variant_is_default: bool
    variant_reason: str
    index_url: str
    requirement: str
    expected_build: str
    cuda: str | None
    toolkit_package: str | None
    toolkit_prefix: str | None
    min_driver: str | None
    driver_ga: str | None
    driver_branch: str | None
    driver_branch_max: str | None
    driver_flavor: str | None
    nccl: str | None
    python_min: str
    python_max: str
    python: str | None
    os: str | None
    os_name: str | None
    el_major: int | None
    repo: str | None
    glibc: str | None
    glibc_required: str
    gpu_archs: list[str]
    gpu_families: list[str]
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    #: where the chosen variant can come from, each with the pin it can satisfy
    #: (gpufleet.planning.wheel_sources: the PyTorch index always, PyPI for its default)
    wheel_sources: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """The plan back from :meth:`to_dict` (the ``gpufleet_plan`` fact, a manifest).

        Every field without a default must be present; keys this version does not know are
        ignored. Raises ValueError naming the missing keys.
        """
        if isinstance(data, Plan):
            return data
        known = fields(cls)
        missing = [
            f.name
            for f in known
            if f.name not in data and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            raise ValueError(
                f"not a gpufleet plan (missing {', '.join(missing)}); pass the whole "
                "gpufleet_plan fact or the output of `gpufleet plan --json`"
            )
        values = {f.name: data[f.name] for f in known if f.name in data}
        for key in ("gpu_archs", "gpu_families", "notes", "sources"):
            if key in values:
                values[key] = [str(v) for v in values[key] or []]
        if "wheel_sources" in values:
            values["wheel_sources"] = [
                {str(k): str(v) for k, v in dict(src).items()}
                for src in values["wheel_sources"] or []
            ]
        return cls(**values)

    @property
    def branch_max(self) -> int | None:
        """``driver_branch_max`` as a number (None: no GPU or repository cap)."""
        return int(self.driver_branch_max) if self.driver_branch_max else None


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class _Ctx:
    torch: str
    minor: str
    forced: str | None
    os: TargetOs | None
    driver: str | None
    archs: tuple[CC, ...]
    python: str | None

    @cached_property
    def driver_v(self) -> V.Version | None:
        """The installed driver, parsed once (validated by _validate)."""
        return V.parse(self.driver) if self.driver is not None else None

    @cached_property
    def python_v(self) -> V.Version | None:
        return V.parse(self.python) if self.python is not None else None


def _refuse(
    message: str, alternatives: Sequence[str] = (), hints: Sequence[str] = ()
) -> PlanRefused:
    if alternatives:
        message += " Nearest combinations that work: " + "; ".join(alternatives) + "."
    if hints:
        message += " Alternatively " + "; or ".join(hints) + "."
    return PlanRefused(message, alternatives)


def _validate(req: PlanRequest, data: CompatData) -> tuple[_Ctx, TorchRelease]:
    known = f"{data.torch[0].minor} to {data.torch[-1].minor}"
    if not V.is_torch_version(req.torch):
        raise _refuse(
            f"Refused: torch version {req.torch!r} is malformed; write the exact release as "
            f"X.Y.Z (for example {data.torch[-1].latest}). gpufleet knows torch {known}."
        )
    minor = V.torch_minor(req.torch)
    rel = data.release(minor)
    if rel is None:
        newest = [
            r.latest for r in sorted(data.torch, key=lambda r: _minor_distance(r.minor, minor))[:2]
        ]
        raise _refuse(
            f"Refused: torch {req.torch} is not in gpufleet's compatibility data (compiled "
            f"{data.compiled}; it knows torch {known}). A new release is added as one entry "
            "in src/gpufleet/data/compat.json.",
            [f"torch=={p}" for p in newest],
        )
    if req.torch not in rel.patches:
        raise _refuse(
            f"Refused: torch {req.torch} is not a published {minor} release "
            f"(known: {', '.join(rel.patches)}).",
            [f"torch=={rel.latest}"],
        )
    forced = req.variant.strip().lower() if req.variant else None
    if forced is not None and forced != CPU and not V.is_cuda_variant(forced):
        raise _refuse(
            f"Refused: CUDA variant {req.variant!r} is malformed; use 'cpu' or cuXYZ as in the "
            f"wheel index (torch {minor} publishes {', '.join(rel.variants)} and cpu)."
        )
    target_os = None
    if req.os:
        try:
            target_os = parse_os(req.os)
        except OsError as exc:
            raise _refuse(f"Refused: {exc}.") from None
    driver = None
    if req.driver:
        if not V.is_driver_version(req.driver):
            raise _refuse(
                f"Refused: driver version {req.driver!r} is malformed; write it as "
                "nvidia-smi prints it, e.g. 570.86.15."
            )
        driver = req.driver.strip()
    archs: list[CC] = []
    for text in req.gpu_archs:
        try:
            cc = parse_arch(text)
        except ArchError as exc:
            raise _refuse(f"Refused: {exc}.") from None
        if cc not in archs:
            archs.append(cc)
    python = None
    if req.python:
        try:
            python = V.python_minor(req.python)
        except ValueError:
            raise _refuse(
                f"Refused: Python version {req.python!r} is malformed; write it as 3.11."
            ) from None
    ctx = _Ctx(req.torch, minor, forced, target_os, driver, tuple(sorted(archs)), python)
    return ctx, rel


def _minor_distance(a: str, b: str) -> tuple[int, int]:
    pa, pb = V.parse(a), V.parse(b)
    dist = abs((pa[0] * 100 + pa[1]) - (pb[0] * 100 + pb[1]))
    return dist, -(pa[0] * 100 + pa[1])  # ties: newer first


# --------------------------------------------------------------------------- judging


def _arch_cap(ctx: _Ctx, data: CompatData) -> tuple[int | None, str]:
    """Newest driver branch the GPUs (and the EL repo) allow, with who imposes it."""
    cap: int | None = None
    who = ""
    for cc in ctx.archs:
        fam = family_of(cc)
        if fam.last_branch is not None and (cap is None or fam.last_branch < cap):
            cap, who = fam.last_branch, f"{fam.name} GPUs"
    el_cap = ctx.os.el.branch_max if ctx.os is not None else None
    if ctx.os is not None and el_cap is not None and (cap is None or el_cap < cap):
        cap, who = el_cap, f"NVIDIA's {ctx.os.el.repo} repository"
    return cap, who


def _release_problems(rel: TorchRelease, ctx: _Ctx) -> list[str]:
    problems = []
    if ctx.python is not None:
        lo, hi = rel.python
        lo_v, hi_v = rel.python_v
        have = ctx.python_v
        if have is not None and not (V.at_least(have, lo_v) and V.at_least(hi_v, have)):
            problems.append(
                f"torch {rel.minor} wheels exist for Python {lo} to {hi}, not {ctx.python}"
            )
    if ctx.os is not None and not V.at_least(ctx.os.el.glibc_v, rel.glibc_v):
        problems.append(
            f"torch {rel.minor} wheels are manylinux_{rel.glibc.replace('.', '_')} and need "
            f"glibc >= {rel.glibc}, but {ctx.os} has glibc {ctx.os.el.glibc}"
        )
    return problems


def _variant_problems(variant: Variant, ctx: _Ctx, data: CompatData) -> list[str]:
    if variant.name == CPU:
        return []
    problems = []
    built = variant.archs.arch_list if variant.archs is not None else ()
    missing = [cc for cc in ctx.archs if covers(cc, built) is None]
    if missing and variant.archs is not None:
        have = ", ".join(a for a in built if a.startswith("sm_"))
        ptx = f" + PTX {variant.archs.ptx}" if variant.archs.ptx else ""
        names = ", ".join(f"{sm(cc)} ({family_of(cc).name})" for cc in missing)
        problems.append(f"its wheels carry no code for {names} (they have {have}{ptx})")
    cuda = data.cuda[str(variant.cuda)]
    floor = cuda.floor_v
    if ctx.driver_v is not None and not V.at_least(ctx.driver_v, floor):
        problems.append(
            f"it needs NVIDIA driver >= {cuda.floor} (CUDA {cuda.version.split('.')[0]}.x "
            f"minor-version floor) and the node has {ctx.driver}"
        )
    cap, who = _arch_cap(ctx, data)
    if cap is not None and cap < floor[0]:
        problems.append(f"it needs driver branch >= {floor[0]}, but {who} stop at branch {cap}")
    return problems


def _published(rel: TorchRelease, patch: str) -> list[Variant]:
    return rel.variants_for(patch)


def _cpu_variant() -> Variant:
    return Variant(CPU, None, "confirmed", None, None, "")


def _alternatives(
    ctx: _Ctx, data: CompatData, skip: Iterable[tuple[str, str]] = (), limit: int = 3
) -> list[str]:
    """Nearest (torch, variant) pairs with no problem: same release first, then by distance."""
    skipped = set(skip)
    out: list[str] = []
    for rel in sorted(data.torch, key=lambda r: _minor_distance(r.minor, ctx.minor)):
        if _release_problems(rel, ctx):
            continue
        patch = ctx.torch if rel.minor == ctx.minor else rel.latest
        variants = _published(rel, patch)
        ordered = sorted(
            variants, key=lambda v: (v.name == rel.default, _preference(v, ctx, data)), reverse=True
        )
        taken = 0
        for v in ordered:
            if v.confidence == "unconfirmed" or (rel.minor, v.name) in skipped:
                continue
            if _variant_problems(v, ctx, data):
                continue
            out.append(f"torch=={patch} with {v.name} ({data.index_url(v.name)})")
            taken += 1
            if len(out) >= limit or taken >= 2:
                break
        if len(out) >= limit:
            break
    return out


def _hints(ctx: _Ctx, rel: TorchRelease, data: CompatData) -> list[str]:
    """Fixes on the node side that would make the requested release work."""
    hints = []
    if ctx.os is not None and _release_problems(
        rel, _Ctx(ctx.torch, ctx.minor, None, ctx.os, None, (), None)
    ):
        hints.append(f"move the node to EL8 or newer (glibc >= {rel.glibc})")
    if ctx.driver is not None:
        for v in sorted(_published(rel, ctx.torch), key=lambda v: v.name != rel.default):
            if ctx.forced and v.name != ctx.forced:
                continue
            relaxed = _Ctx(ctx.torch, ctx.minor, ctx.forced, ctx.os, None, ctx.archs, ctx.python)
            if not _variant_problems(v, relaxed, data):
                cuda = data.cuda[str(v.cuda)]
                hints.append(
                    f"upgrade the driver to >= {cuda.floor} (branch "
                    f"{max(data.policy.recommended_min_branch, cuda.ga_branch)}) "
                    f"and keep {v.name}"
                )
                break
    return hints


# --------------------------------------------------------------------------- planning


def make_plan(req: PlanRequest, data: CompatData | None = None) -> Plan:
    """Plan one node. Raises PlanRefused (exit 2) for impossible or malformed input."""
    data = data or load()
    ctx, rel = _validate(req, data)
    where = f" on {ctx.os}" if ctx.os else ""
    published = _published(rel, ctx.torch)
    names = [v.name for v in published]

    release_problems = _release_problems(rel, ctx)
    if release_problems:
        alts = _alternatives(ctx, data)
        hints = _hints(ctx, rel, data)
        raise _refuse(
            f"Refused: torch {ctx.torch}{where} cannot work: " + "; ".join(release_problems) + ".",
            alts,
            hints,
        )

    cap, cap_who = _arch_cap(ctx, data)
    if ctx.driver is not None and cap is not None and V.driver_branch(ctx.driver) > cap:
        raise _refuse(
            f"Refused: the installed driver {ctx.driver} (branch "
            f"{V.driver_branch(ctx.driver)}) is newer than {cap_who} support (last branch "
            f"{cap}); install branch {cap} with the proprietary kernel modules."
        )

    notes: list[str] = []
    if ctx.forced is not None:
        if ctx.forced == CPU:
            chosen = _cpu_variant()
            reason = "requested: the CPU-only wheel (no NVIDIA driver or CUDA toolkit needed)"
            if ctx.archs:
                notes.append("GPU architectures were given, but the CPU wheel never uses a GPU")
        else:
            match = [v for v in published if v.name == ctx.forced]
            if not match:
                others = sorted(
                    (r for r in data.torch if ctx.forced in r.variants),
                    key=lambda r: _minor_distance(r.minor, ctx.minor),
                )
                alts = [
                    f"torch=={r.latest} with {ctx.forced} ({data.index_url(ctx.forced)})"
                    for r in others
                    if not _release_problems(r, ctx)
                    and not _variant_problems(r.variants[ctx.forced], ctx, data)
                ][:2]
                alts += _alternatives(ctx, data, limit=3 - len(alts))
                raise _refuse(
                    f"Refused: torch {ctx.torch} publishes no {ctx.forced} wheels (it has "
                    f"{', '.join(names)} and cpu).",
                    alts,
                )
            chosen = match[0]
            problems = _variant_problems(chosen, ctx, data)
            if problems:
                alts = _alternatives(ctx, data, skip=[(rel.minor, chosen.name)])
                hints = _hints(ctx, rel, data)
                raise _refuse(
                    f"Refused: torch {ctx.torch} with {chosen.name}{where} cannot work: "
                    + "; ".join(problems)
                    + ".",
                    alts,
                    hints,
                )
            reason = f"requested: {chosen.name}"
            if chosen.name == rel.default:
                reason += " (also the PyPI default)"
            if chosen.confidence != "confirmed":
                notes.append(
                    f"{chosen.name} for torch {rel.minor} is {chosen.confidence}: "
                    f"{chosen.note or 'only secondary sources list it'}"
                )
    else:
        judged = [(v, _variant_problems(v, ctx, data)) for v in published]
        viable = [v for v, p in judged if not p and v.confidence != "unconfirmed"]
        if not viable:
            detail = "; ".join(f"{v.name}: {'; '.join(p)}" for v, p in judged if p)
            hints = _hints(ctx, rel, data)
            raise _refuse(
                f"Refused: no CUDA wheel of torch {ctx.torch} works{where} ({detail}).",
                _alternatives(ctx, data),
                hints,
            )
        default = next((v for v in viable if v.name == rel.default), None)
        if default is not None:
            chosen = default
            reason = (
                f"{chosen.name} is the PyPI default for torch {rel.minor} (what plain "
                f"`pip install torch=={ctx.torch}` installs)"
            )
        else:
            chosen = max(viable, key=lambda v: _preference(v, ctx, data))
            why_not = next((p for v, p in judged if v.name == rel.default), [])
            reason = (
                f"the PyPI default {rel.default} is excluded: {'; '.join(why_not)}; "
                f"{chosen.name} is the best remaining variant"
            )
            cuda = data.cuda[str(chosen.cuda)]
            if ctx.driver_v is not None and V.at_least(ctx.driver_v, cuda.ga_driver_v):
                reason += (
                    f" (the installed {ctx.driver} meets CUDA {cuda.version}'s GA "
                    f"driver {cuda.ga_driver}, so no minor-version limits apply)"
                )
            if chosen.confidence != "confirmed":
                notes.append(
                    f"{chosen.name} for torch {rel.minor} is {chosen.confidence}: "
                    f"{chosen.note or 'only secondary sources list it'}"
                )

    return _build(ctx, rel, chosen, reason, notes, data)


def _preference(v: Variant, ctx: _Ctx, data: CompatData) -> tuple[int, int, tuple[int, ...]]:
    cuda = data.cuda[str(v.cuda)]
    ga_ok = int(ctx.driver_v is not None and V.at_least(ctx.driver_v, cuda.ga_driver_v))
    return ga_ok, int(v.confidence == "confirmed"), cuda.version_v


def _build(
    ctx: _Ctx, rel: TorchRelease, chosen: Variant, reason: str, notes: list[str], data: CompatData
) -> Plan:
    order = [f.name for f in data.families]
    families = sorted({family_of(cc).name for cc in ctx.archs}, key=order.index)
    cuda: Cuda | None = data.cuda[str(chosen.cuda)] if chosen.name != CPU else None
    branch = branch_max = flavor = None
    sources = [k for k in data.sources if re.search(rf"\b{re.escape(k)}\b", rel.source)]
    if cuda is not None:
        cap, cap_who = _arch_cap(ctx, data)
        rec = max(data.policy.recommended_min_branch, cuda.ga_branch)
        if cap is not None and rec > cap:
            rec = cap
        if rec < cuda.ga_branch:
            notes.append(
                f"driver branch {rec} is below CUDA {cuda.version}'s GA driver "
                f"{cuda.ga_driver} ({cap_who} stop at {cap}); the wheel runs through "
                "minor-version compatibility, which does not cover PTX JIT"
            )
        branch, branch_max = str(rec), (str(cap) if cap is not None else None)
        old = [cc for cc in ctx.archs if not open_modules_supported(cc)]
        if old or rec < data.policy.open_modules_min_branch:
            flavor = "proprietary"
        else:
            flavor = "open"
            if not ctx.archs:
                notes.append(
                    "driver flavor 'open' assumes Turing or newer GPUs; give the GPU "
                    "architectures (preflight reads them with lspci) to be sure"
                )
        if (
            ctx.driver_v is not None
            and rec >= cuda.ga_branch
            and not V.at_least(ctx.driver_v, cuda.ga_driver_v)
        ):
            notes.append(
                f"the installed driver {ctx.driver} is below CUDA {cuda.version}'s GA "
                f"driver {cuda.ga_driver}: it works through minor-version "
                "compatibility (no PTX JIT); branch "
                f"{branch} removes that limit"
            )
        if ctx.os is not None:
            el = ctx.os.el
            if el.cuda_max_v is not None and not V.at_least(el.cuda_max_v, cuda.version_v):
                notes.append(
                    f"{cuda.toolkit_package} is not known in NVIDIA's {el.repo} "
                    f"repository (newest known {el.cuda_max}); set "
                    "cuda_toolkit_install: false if it is missing there"
                )
            if el.cuda_min_v is not None and not V.at_least(cuda.version_v, el.cuda_min_v):
                notes.append(
                    f"NVIDIA's {el.repo} repository is only known to carry CUDA "
                    f"{el.cuda_min} and newer; {cuda.toolkit_package} may be missing"
                )
        sources += ["RN", "MVC", "DIG"]
    if ctx.os is not None and not ctx.os.el.supported:
        notes.append(f"{ctx.os}: {ctx.os.el.why_unsupported}; gpufleet's roles refuse it")
    return Plan(
        torch=ctx.torch,
        torch_minor=rel.minor,
        variant=chosen.name,
        variant_is_default=chosen.name == rel.default,
        variant_reason=reason,
        index_url=data.index_url(chosen.name),
        requirement=f"torch=={ctx.torch}",
        expected_build=f"{ctx.torch}+{chosen.name}",
        cuda=cuda.version if cuda else None,
        toolkit_package=cuda.toolkit_package if cuda else None,
        toolkit_prefix=cuda.toolkit_prefix if cuda else None,
        min_driver=cuda.floor if cuda else None,
        driver_ga=cuda.ga_driver if cuda else None,
        driver_branch=branch,
        driver_branch_max=branch_max,
        driver_flavor=flavor,
        nccl=(chosen.nccl or rel.nccl) if cuda else None,
        python_min=rel.python[0],
        python_max=rel.python[1],
        python=ctx.python,
        os=ctx.os.key if ctx.os else None,
        os_name=str(ctx.os) if ctx.os else None,
        el_major=ctx.os.major if ctx.os else None,
        repo=ctx.os.el.repo if ctx.os else None,
        glibc=ctx.os.el.glibc if ctx.os else None,
        glibc_required=rel.glibc,
        gpu_archs=[sm(cc) for cc in ctx.archs],
        gpu_families=families,
        notes=notes,
        sources=list(dict.fromkeys(sources)),
        wheel_sources=[w.as_dict() for w in sources_for(ctx.torch, chosen.name, rel, data)],
    )


_SOURCE_NAMES = {"pytorch-index": "PyTorch index", "pypi": "PyPI"}


def _pip_lines(plan: Plan) -> list[str]:
    """One ``pip:`` line per source of the plan's variant; a plan from before the sources
    were recorded shows its index and requirement."""
    sources = plan.wheel_sources or [
        {"source": "pytorch-index", "index_url": plan.index_url, "requirement": plan.requirement}
    ]
    lines = []
    for i, src in enumerate(sources):
        head = "  pip:            " if i == 0 else "                  "
        name = _SOURCE_NAMES.get(src["source"], src["source"])
        lines.append(
            f"{head}pip install {src['requirement']} --index-url {src['index_url']}  ({name})"
        )
    if len(sources) == 1:
        lines.append(
            "                  (not on PyPI: PyPI carries only this release's default build)"
        )
    return lines


def describe(plan: Plan) -> str:
    """Human rendering used by `gpufleet plan` and the preflight role."""
    lines = [
        f"torch {plan.torch} ({plan.variant}{', PyPI default' if plan.variant_is_default else ''})",
        f"  why:            {plan.variant_reason}",
        *_pip_lines(plan),
        f"  installs:       torch {plan.expected_build}"
        + (f", CUDA runtime {plan.cuda}, NCCL {plan.nccl}" if plan.cuda else " (CPU only)"),
        f"  python:         {plan.python_min} to {plan.python_max}"
        + (f" (requested {plan.python})" if plan.python else ""),
    ]
    if plan.cuda:
        lines += [
            f"  toolkit:        {plan.toolkit_package} -> {plan.toolkit_prefix}",
            f"  driver:         >= {plan.min_driver} (floor); recommended branch "
            f"{plan.driver_branch}, {plan.driver_flavor} kernel modules"
            + (
                f"; newest allowed branch {plan.driver_branch_max}"
                if plan.driver_branch_max
                else ""
            ),
        ]
    else:
        lines.append("  driver/toolkit: none needed")
    if plan.os:
        lines.append(
            f"  os:             {plan.os_name} (glibc {plan.glibc}, NVIDIA repo {plan.repo})"
        )
    if plan.gpu_archs:
        lines.append(
            f"  gpus:           {', '.join(plan.gpu_archs)} ({', '.join(plan.gpu_families)})"
        )
    lines += [f"  note:           {n}" for n in plan.notes]
    return "\n".join(lines)


__all__ = ["CPU", "Plan", "PlanRefused", "PlanRequest", "cc_str", "describe", "make_plan"]
