"""Small stand-in wheels of torch builds and the PEP 503 indexes that serve them, for the
tests of the torch step (sources, wheelhouse, lock) without a multi-GB download.

A stand-in torch behaves as the real one where gpufleet looks: its metadata version
(unlabelled like PyPI's build, or labelled like the PyTorch index's), ``torch/version.py``
(``__version__`` with the label, ``cuda``), and after ``import torch``:
``torch.version.cuda``, ``torch.cuda.nccl.version()`` (read from the nvidia-nccl stand-in
it depends on, as the real build loads that wheel's library) and
``torch.cuda.is_available()`` (False: no GPU).
"""

from __future__ import annotations

import base64
import hashlib
import html
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_TORCH_INIT = """\
from importlib import metadata as _metadata

from torch import version
from torch.version import __version__


class _Nccl:
    @staticmethod
    def version():
        for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
            try:
                return tuple(int(p) for p in _metadata.version(dist).split("."))
            except _metadata.PackageNotFoundError:
                continue
        raise RuntimeError("NCCL library not found")


class cuda:
    nccl = _Nccl

    @staticmethod
    def is_available():
        return False
"""


@dataclass(frozen=True)
class Wheel:
    name: str  # distribution name (normalised: torch, nvidia-nccl-cu13)
    version: str  # metadata version (2.13.0, 2.13.0+cu126)
    files: Mapping[str, str]
    requires: tuple[str, ...] = field(default=())

    @property
    def filename(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}-py3-none-any.whl"


def torch_build(release: str, label: str, cuda: str | None, nccl_dist: str | None) -> Wheel:
    """A torch stand-in: ``label`` "" = PyPI's unlabelled wheel of the build ``cuda``."""
    shown = f"{release}+{label}" if label else release
    printed = shown if label else f"{release}+cu{(cuda or '').replace('.', '')}"
    version_py = (
        "from typing import Optional\n\n"
        f"__version__ = {printed!r}\ndebug = False\ncuda: Optional[str] = {cuda!r}\n"
    )
    return Wheel(
        "torch",
        shown,
        {"torch/__init__.py": _TORCH_INIT, "torch/version.py": version_py},
        requires=(nccl_dist,) if nccl_dist else (),
    )


def plain(name: str, version: str) -> Wheel:
    module = name.replace("-", "_")
    return Wheel(name, version, {f"{module}/__init__.py": f"VERSION = {version!r}\n"})


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(wheel: Wheel, dest: Path) -> Path:
    """Write ``wheel`` into ``dest`` (a valid wheel: METADATA, WHEEL, RECORD)."""
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{wheel.name.replace('-', '_')}-{wheel.version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {wheel.name}\nVersion: {wheel.version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in wheel.requires)
    entries = dict(wheel.files)
    entries[f"{dist_info}/METADATA"] = meta
    entries[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    path = dest / wheel.filename
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in entries.items():
            data = text.encode()
            zf.writestr(name, data)
            record.append(f"{name},sha256={_b64(data)},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return path


def simple_index(root: Path, wheels: Iterable[Path]) -> Path:
    """A PEP 503 index at ``root`` (one page per project, links with #sha256=) serving
    ``wheels`` from ``root/files``; returns ``root``."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = {}
    for w in wheels:
        target = files / w.name
        if target != w:
            target.write_bytes(w.read_bytes())
        project = w.name.split("-", 1)[0].replace("_", "-").lower()
        projects.setdefault(project, []).append(target)
    for project, paths in projects.items():
        page = root / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="../files/{html.escape(p.name)}#sha256='
            f'{hashlib.sha256(p.read_bytes()).hexdigest()}">{html.escape(p.name)}</a>\n'
            for p in sorted(paths)
        )
        page.write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root
