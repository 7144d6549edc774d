"""The torch step of torch_env: which source it installs from, with which pin, and whether
what an env holds is the planned build (pure functions, stdlib only).

A site points gpufleet at one of three kinds of source (``gpufleet_torch_source``):

- ``pytorch-index``: the PyTorch index or a mirror of its layout (one index per variant,
  every build labelled ``+<variant>``): pin ``torch==2.13.0+cu130``;
- ``pypi``: PyPI or a proxy of it (Nexus, Artifactory, devpi, bandersnatch): one build per
  release, the release's default variant, unlabelled: pin ``torch===2.13.0`` (``===``:
  exactly the unlabelled version, which a labelled build of an extra index or a find-links
  directory cannot satisfy, whereas ``==2.13.0`` would prefer it);
- ``wheelhouse``: find-links directories or pages, no index (``pip download`` output):
  the pin of the torch wheel found there (:func:`wheelhouse_pin`).

``auto`` (the default) reads the settings: no index URL -> the plan's PyTorch index; an
index URL on download.pytorch.org or ending in a variant (``.../cu130``) -> pytorch-index;
any other index URL -> pypi.

A variant the source cannot serve is refused before any change (:func:`torch_install`,
called by check_inventory.yml's value checks, preflight's verdict and torch_env's own
check), naming the variables and the two ways out. After the install, the variant is
verified by what torch reports (:func:`found_problems`), never by the version label alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gpufleet.errors import RefusedError
from gpufleet.planning import versions as V
from gpufleet.planning import wheel_sources as WS
from gpufleet.planning.compat import CompatData, load

DEFAULT_PYTORCH_INDEX_ROOT = "https://download.pytorch.org/whl"
AUTO = "auto"
SETTINGS = (AUTO, *WS.KINDS)
PYTORCH_HOST = "download.pytorch.org"

#: how the messages name each setting when the caller knows no better (a role variable
#: that took the shared variable's value is named by the shared one, as users write it)
DEFAULT_NAMES: Mapping[str, str] = {
    "source": "gpufleet_torch_source",
    "index_url": "gpufleet_pip_index_url",
    "find_links": "gpufleet_pip_find_links",
    "variant": "torch_env_wheel_variant",
    "plan_variant": "gpufleet_cuda_variant",
}


class TorchSourceError(RefusedError):
    """The configured source cannot serve the build the node needs, or the torch settings
    cannot work."""


def redact_url(url: str) -> str:
    """The URL with any ``user:password@`` replaced by ``***@``."""
    parts = urlsplit(url)
    if not (parts.username or parts.password):
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class SourceSettings:
    """What the site configured (torch_env's variables as the role sees them)."""

    source: str = AUTO
    index_url: str = ""
    find_links: tuple[str, ...] = ()
    index_root: str = DEFAULT_PYTORCH_INDEX_ROOT
    names: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_NAMES))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SourceSettings:
        links = data.get("find_links") or ()
        if isinstance(links, str):
            links = (links,)
        names = {**DEFAULT_NAMES, **dict(data.get("names") or {})}
        return cls(
            source=str(data.get("source") or AUTO).strip(),
            index_url=str(data.get("index_url") or "").strip(),
            find_links=tuple(str(x).strip() for x in links if str(x).strip()),
            index_root=str(data.get("index_root") or DEFAULT_PYTORCH_INDEX_ROOT),
            names=names,
        )

    def name(self, key: str) -> str:
        return self.names.get(key, key)

    def shown(self, key: str) -> str:
        """``name='value'`` with credentials masked, for messages (a name given as
        ``gpufleet_x (feeds role_x)`` reads ``gpufleet_x='value' (feeds role_x)``)."""
        if key == "index_url":
            value = repr(redact_url(self.index_url))
        elif key == "find_links":
            value = repr([redact_url(x) for x in self.find_links])
        else:
            value = repr(getattr(self, key))
        name, sep, rest = self.name(key).partition(" (")
        return f"{name}={value}{sep}{rest}"


@dataclass(frozen=True)
class TorchInstall:
    """The torch step as it will run on one node."""

    source: str  # pytorch-index | pypi | wheelhouse
    source_why: str
    variant: str
    torch: str  # the release, X.Y.Z
    build: str  # what torch.__version__ prints: 2.13.0+cu130
    index_url: str  # "" = no index (a wheelhouse); credentials masked (the site's URL is
    # the role's variable)
    requirement: str  # torch==2.13.0+cu130 / torch===2.13.0 / "" (wheelhouse not yet read)
    cuda: str | None  # torch.version.cuda of the build (None: CPU build)
    nccl: str | None  # torch.cuda.nccl.version() as X.Y.Z (None: no NCCL)
    pypi_variant: str = ""  # the build PyPI carries of this release (its default)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def looks_like_pytorch_index(url: str) -> bool:
    """download.pytorch.org, or a URL whose last path segment is a wheel variant."""
    parts = urlsplit(url.strip())
    if (parts.hostname or "").lower() == PYTORCH_HOST:
        return True
    segments = [s for s in parts.path.split("/") if s]
    return bool(segments) and V.is_wheel_variant(segments[-1])


def source_kind(settings: SourceSettings) -> tuple[str, str]:
    """The source kind the settings select, and why (for the plan line and messages)."""
    chosen = settings.source
    if chosen not in SETTINGS:
        raise TorchSourceError(
            f"{settings.shown('source')} is not a torch source -> allowed: " + ", ".join(SETTINGS)
        )
    if chosen == WS.WHEELHOUSE and not settings.find_links:
        raise TorchSourceError(
            f"{settings.shown('source')} needs at least one wheelhouse, but "
            f"{settings.name('find_links')} is empty -> fix: list the directories (absolute "
            "paths on the node) or pages that hold the torch wheel and its dependencies in "
            f"{settings.name('find_links')}"
        )
    if chosen != AUTO:
        return chosen, f"{settings.name('source')}: {chosen}"
    if not settings.index_url:
        return WS.PYTORCH_INDEX, (
            f"{settings.name('source')}: auto and {settings.name('index_url')} is empty: "
            "the plan's PyTorch index"
        )
    if looks_like_pytorch_index(settings.index_url):
        return WS.PYTORCH_INDEX, (
            f"{settings.name('source')}: auto takes {settings.name('index_url')} for the "
            f"PyTorch index's layout: on {PYTORCH_HOST} or ending in a variant"
        )
    return WS.PYPI, (
        f"{settings.name('source')}: auto takes {settings.name('index_url')} for a PyPI "
        f"mirror: not on {PYTORCH_HOST} and no variant at its end"
    )


def build_facts(
    torch: str, variant: str, data: CompatData | None = None
) -> tuple[str | None, str | None]:
    """(torch.version.cuda, NCCL X.Y.Z) of ``variant`` of ``torch`` by the table
    ((None, None) for the CPU build and for variants the table does not know: ROCm, XPU)."""
    if not V.is_cuda_variant(variant):
        return None, None
    data = data or load()
    rel = data.release(V.torch_minor(torch))
    cuda = V.variant_cuda(variant)
    if rel is None or variant not in rel.variants:
        return cuda, None
    return cuda, rel.variants[variant].nccl or rel.nccl


def _variant_named(settings: SourceSettings, plan: Mapping[str, Any], override: str) -> str:
    if override:
        return f"{settings.name('variant')}={override!r}"
    reason = str(plan.get("variant_reason") or "the planner's choice")
    return f"the plan's variant {plan.get('variant')!r} ({reason})"


def torch_install(
    plan: Mapping[str, Any],
    variant: str,
    settings: SourceSettings,
    wheelhouse: Sequence[str] | None = None,
    data: CompatData | None = None,
) -> TorchInstall:
    """The torch step for ``plan`` with ``variant`` ("" = the plan's) from ``settings``.

    ``wheelhouse``: the torch wheel file names the node's find-links hold (None: not read
    yet; the pin is then left empty and the wheelhouse check comes later). Raises
    TorchSourceError when the source cannot serve the build.
    """
    for key in ("torch", "variant"):
        if not plan.get(key):
            raise TorchSourceError(
                f"gpufleet_plan has no {key!r}; the plan must come from the preflight role"
            )
    torch = str(plan["torch"])
    if not V.is_torch_version(torch):
        raise TorchSourceError(f"gpufleet_plan.torch={torch!r} is not a release X.Y.Z")
    override = (variant or "").strip()
    wanted = override or str(plan["variant"])
    if not V.is_wheel_variant(wanted):
        raise TorchSourceError(
            f"{settings.name('variant')}={wanted!r} is not a wheel variant "
            "(cpu, cuXXX such as cu128, rocmX.Y, xpu)"
        )
    data = data or load()
    rel = data.release(V.torch_minor(torch))
    kind, why = source_kind(settings)
    if wanted == plan["variant"] and plan.get("cuda") is not None:
        cuda, nccl = plan.get("cuda"), plan.get("nccl")
    else:
        cuda, nccl = build_facts(torch, wanted, data)
    labelled = f"{torch}+{wanted}"
    common = {
        "source_why": why,
        "variant": wanted,
        "torch": torch,
        "build": labelled,
        "pypi_variant": WS.pypi_variant(rel) if rel is not None else "",
    }

    if kind == WS.PYTORCH_INDEX:
        index = redact_url(settings.index_url) or _pytorch_index(plan, wanted, settings)
        return TorchInstall(
            source=kind,
            index_url=index,
            requirement=f"torch=={labelled}",
            cuda=cuda,
            nccl=nccl,
            **common,
        )
    if kind == WS.PYPI:
        why_not = WS.not_on_pypi(torch, wanted, rel) if rel is not None else ""
        if why_not:
            default = WS.pypi_variant(rel) if rel is not None else "?"
            raise TorchSourceError(
                f"{_variant_named(settings, plan, override)} cannot come from "
                f"{settings.shown('index_url') if settings.index_url else 'PyPI'} ({why}); "
                f"{why_not} -> fix: either point {settings.name('index_url')} at a mirror of "
                f"{settings.index_root.rstrip('/')}/{wanted} and set "
                f"{settings.name('source')}: pytorch-index, or install PyPI's build: "
                + (f"{settings.name('variant')}: '' (the plan's variant) with " if override else "")
                + f"{settings.name('plan_variant')}: {default} (its driver floor applies; "
                f"`gpufleet plan --torch {torch} --cuda {default}` shows it)"
            )
        return TorchInstall(
            source=kind,
            index_url=redact_url(settings.index_url) or WS.PYPI_SIMPLE,
            requirement=f"torch==={torch}",
            cuda=cuda,
            nccl=nccl,
            **common,
        )
    pin = ""
    if wheelhouse is not None:
        pin = wheelhouse_pin(wheelhouse, torch, wanted, rel.default if rel else "", settings)
    return TorchInstall(source=kind, index_url="", requirement=pin, cuda=cuda, nccl=nccl, **common)


def _pytorch_index(plan: Mapping[str, Any], variant: str, settings: SourceSettings) -> str:
    """The PyTorch index of ``variant``: the plan's for its own variant, else the plan's
    with its variant segment swapped, else ``<index_root>/<variant>``."""
    plan_index = str(plan.get("index_url") or "").rstrip("/")
    plan_variant = str(plan.get("variant") or "")
    if variant == plan_variant and plan_index:
        return plan_index
    suffix = "/" + plan_variant
    if plan_variant and plan_index.endswith(suffix):
        return plan_index[: -len(suffix)] + "/" + variant
    return settings.index_root.rstrip("/") + "/" + variant


_WHEEL = re.compile(r"^torch-(?P<version>[0-9][^-]*)-(?P<tags>.+)\.whl$", re.IGNORECASE)


def torch_wheels(names: Iterable[str]) -> list[tuple[str, str, str]]:
    """(file name, release, label) of each torch wheel among ``names`` (label "" when
    unlabelled); other files are ignored."""
    out = []
    for name in names:
        base = name.rsplit("/", 1)[-1].split("#", 1)[0]
        m = _WHEEL.match(base)
        if m:
            release, _, label = m.group("version").partition("+")
            out.append((base, release, label))
    return out


def wheelhouse_pin(
    names: Sequence[str],
    torch: str,
    variant: str,
    pypi_default: str,
    settings: SourceSettings,
) -> str:
    """The pin a wheelhouse holding ``names`` can satisfy for ``variant`` of ``torch``:
    the labelled build when it is there, else PyPI's unlabelled build when ``variant`` is
    PyPI's default; else TorchSourceError naming what the wheelhouse holds."""
    wheels = torch_wheels(names)
    if any(rel == torch and label == variant for _, rel, label in wheels):
        return f"torch=={torch}+{variant}"
    if variant == pypi_default and any(rel == torch and not label for _, rel, label in wheels):
        return f"torch==={torch}"
    held = sorted({f"{rel}+{label}" if label else rel for _, rel, label in wheels})
    accepted = f"torch-{torch}+{variant}-*.whl" + (
        f" or torch-{torch}-*.whl (PyPI's {variant} build)" if variant == pypi_default else ""
    )
    raise TorchSourceError(
        f"{settings.shown('find_links')} ({settings.name('source')}: wheelhouse) holds no "
        f"torch {torch} wheel of the {variant} build (torch wheels there: "
        f"{', '.join(held) or 'none'}) -> fix: put {accepted} with its dependencies there "
        f"(`gpufleet lock --torch {torch} --cuda {variant} --wheelhouse DIR` downloads them), "
        f"or choose a build the wheelhouse holds"
    )


def dist_info_holds(names: Iterable[str], install: TorchInstall) -> bool:
    """Whether an env whose site-packages list ``names`` (``torch-2.13.0+cu130.dist-info``)
    holds the build of ``install`` by its name: the labelled build of its variant, or an
    unlabelled one (PyPI's) when the variant is the one PyPI carries. What torch reports is
    judged by torch_env (:func:`found_problems`)."""
    for name in names:
        m = re.match(r"^torch-([^-]+)[.]dist-info$", name)
        if not m:
            continue
        release, _, label = m.group(1).partition("+")
        pypi_build = not label and install.variant == install.pypi_variant
        if release == install.torch and (label == install.variant or pypi_build):
            return True
    return False


def found_problems(
    found: Mapping[str, Any], install: Mapping[str, Any], python: str, imported: bool
) -> list[str]:
    """How what an env holds differs from the planned build ([] = it is the build).

    ``found`` (:mod:`gpufleet.provisioning.torch_probe`): python, dist (torch's metadata
    version, None when absent), version/cuda from torch/version.py, and when ``imported``
    the same as torch reports them after ``import torch`` plus nccl. The release is the
    metadata version without its label; the variant is judged by the CUDA version the build
    reports (and NCCL after an import), so PyPI's unlabelled wheel and the PyTorch index's
    labelled one of the same variant are the same build.
    """
    out = []
    if str(found.get("python") or "") != str(python):
        out.append(f"Python {found.get('python')} (planned {python})")
    dist = found.get("dist")
    if not dist:
        out.append("no torch installed")
        return out
    release = str(dist).partition("+")[0]
    if release != install["torch"]:
        out.append(f"torch {dist} (planned release {install['torch']})")
        return out
    label = str(dist).partition("+")[2]
    if label and label != install["variant"]:
        out.append(f"torch {dist}: the {label} build (planned {install['variant']})")
    if found.get("cuda") != install.get("cuda"):
        out.append(
            f"torch reports CUDA {found.get('cuda') or 'none'} "
            f"(the planned {install['variant']} build has {install.get('cuda') or 'none'})"
        )
    if imported and install.get("nccl") and found.get("nccl") != install.get("nccl"):
        out.append(f"torch reports NCCL {found.get('nccl') or 'none'} (planned {install['nccl']})")
    return out


__all__ = [
    "AUTO",
    "SETTINGS",
    "SourceSettings",
    "TorchInstall",
    "TorchSourceError",
    "build_facts",
    "dist_info_holds",
    "found_problems",
    "looks_like_pytorch_index",
    "source_kind",
    "torch_install",
    "torch_wheels",
    "wheelhouse_pin",
]
