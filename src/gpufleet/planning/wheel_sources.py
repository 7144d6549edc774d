"""Where a torch wheel variant can come from, and the pin each source can satisfy.

Two public sources publish Linux torch wheels, with different version strings:

- the PyTorch index (``https://download.pytorch.org/whl/<variant>``) labels every build
  with its variant: the wheel's metadata version is ``2.13.0+cu130``, so the pin
  ``torch==2.13.0+cu130`` names the build exactly;
- PyPI carries one build per release, the release's default variant (the compatibility
  table's "PyPI default", Linux x86_64), and its metadata version has no local label:
  ``2.13.0``. A labelled pin cannot be satisfied there (PEP 440, "local version
  identifiers": ``==2.13.0+cu130`` matches only the labelled version), while the unlabelled
  ``torch==2.13.0`` matches both the PyPI wheel and any labelled one.

``torch.__version__`` of both builds still prints the label, so what identifies the
variant after an install is what torch reports (``torch.version.cuda``,
``torch.cuda.nccl.version()``), never the metadata version alone
(:mod:`gpufleet.planning.torch_source`).

Sources: peps.python.org/pep-0440 (local version identifiers); pytorch.org/get-started
(the PyTorch index per variant); pypi.org/project/torch (one Linux build per release);
pytorch/pytorch #101798 (PyPI proxies cannot proxy the PyTorch index).

Only the standard library is imported here (the ``gpufleet plan`` path).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from gpufleet.planning.compat import CompatData, TorchRelease

#: the kinds of wheel source a site can point gpufleet at (gpufleet_torch_source)
PYTORCH_INDEX = "pytorch-index"
PYPI = "pypi"
WHEELHOUSE = "wheelhouse"
KINDS = (PYTORCH_INDEX, PYPI, WHEELHOUSE)
PYPI_SIMPLE = "https://pypi.org/simple"


@dataclass(frozen=True)
class WheelSource:
    """One place a variant's wheel is published, with the pin pip can satisfy there."""

    source: str  # pytorch-index | pypi
    index_url: str  # the public index (a mirror of the same layout serves the same pin)
    requirement: str  # torch==2.13.0+cu130 / torch==2.13.0
    build: str  # the wheel's metadata version: 2.13.0+cu130 / 2.13.0

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def pypi_variant(rel: TorchRelease) -> str:
    """The variant of PyPI's Linux x86_64 wheel of this release (its default)."""
    return rel.default


def sources_for(torch: str, variant: str, rel: TorchRelease, data: CompatData) -> list[WheelSource]:
    """Every public source of ``variant`` of ``torch`` (a patch of ``rel``): always the
    PyTorch index (labelled pin); PyPI too where the variant is the release's default."""
    labelled = f"{torch}+{variant}"
    out = [
        WheelSource(
            source=PYTORCH_INDEX,
            index_url=data.index_url(variant),
            requirement=f"torch=={labelled}",
            build=labelled,
        )
    ]
    if variant == pypi_variant(rel):
        out.append(
            WheelSource(
                source=PYPI, index_url=PYPI_SIMPLE, requirement=f"torch=={torch}", build=torch
            )
        )
    return out


def not_on_pypi(torch: str, variant: str, rel: TorchRelease) -> str:
    """Why PyPI cannot serve ``variant`` (empty when it can)."""
    default = pypi_variant(rel)
    if variant == default:
        return ""
    return (
        f"PyPI carries one Linux build of torch {torch}, the {default} build (its default), "
        f"and no {variant} build"
    )


__all__ = [
    "KINDS",
    "PYPI",
    "PYPI_SIMPLE",
    "PYTORCH_INDEX",
    "WHEELHOUSE",
    "WheelSource",
    "not_on_pypi",
    "pypi_variant",
    "sources_for",
]
