"""What an env's torch is, as one JSON line: run by the env's own interpreter on the node.

    python -I torch_probe.py              # no import of torch: metadata + torch/version.py
    python -I torch_probe.py --import     # also what torch reports after `import torch`
    python -I torch_probe.py --find-links # + the torch wheels of the find-links on stdin

Keys: python (X.Y), dist (torch's metadata version, the one pip compares; None when torch
is not installed), version and cuda (torch/version.py, read as text: fast, no CUDA library
loaded), and with ``--import``: version and cuda as torch reports them, nccl (X.Y.Z from
``torch.cuda.nccl.version()``, None for a build without NCCL), cuda_available, and
import_error when the import failed.

The action ``gpufleet.core.torch_facts`` sends this file's text to the node (the env may not
hold gpufleet yet), and :func:`gpufleet.planning.torch_source.found_problems` judges
the answer: the probe before the install, the converged fast path and the check after the
install read these same facts. Standard library only (the env's Python: 3.8 or newer).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib.util
import json
import os
import re
import sys
import urllib.request
from importlib import metadata
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

_HREF = re.compile(r"""href=["']([^"']+)["']""", re.IGNORECASE)
_TORCH_WHEEL = re.compile(r"^torch-[0-9][^-/]*-.+[.]whl$", re.IGNORECASE)
PAGE_TIMEOUT = 30


def _version_file_facts() -> dict[str, Any]:
    """__version__ and cuda from torch/version.py without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = next(iter(spec.submodule_search_locations)) + "/version.py"
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return {}
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("__version__", "cuda"):
            with contextlib.suppress(ValueError):
                key = "version" if target.id == "__version__" else "cuda"
                out[key] = ast.literal_eval(value)
    return out


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _imported_facts() -> dict[str, Any]:
    try:
        import torch  # noqa: PLC0415  (only with --import: loading CUDA libraries is slow)
    except Exception as exc:  # any import failure is a fact to report
        return {"import_error": _failure(exc)}
    out: dict[str, Any] = {
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "nccl": None,
        "cuda_available": False,
    }
    # a driver problem leaves cuda_available False: no GPU usable
    with contextlib.suppress(Exception):
        out["cuda_available"] = bool(torch.cuda.is_available())
    if torch.version.cuda:
        try:
            nccl: Any = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception as exc:  # reported as nccl_error
            out["nccl_error"] = _failure(exc)
    return out


def _page_names(url: str) -> list[str]:
    """The file names a find-links page links to (credentials in the URL become an
    Authorization header; they never reach an error message)."""
    parts = urlsplit(url)
    request = urllib.request.Request(
        urlunsplit((parts.scheme, parts.hostname or "", parts.path, parts.query, ""))
        if not parts.port
        else urlunsplit(
            (parts.scheme, f"{parts.hostname}:{parts.port}", parts.path, parts.query, "")
        )
    )
    if parts.username or parts.password:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    with urllib.request.urlopen(request, timeout=PAGE_TIMEOUT) as page:
        text = page.read().decode("utf-8", "replace")
    return [unquote(h.split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]) for h in _HREF.findall(text)]


def wheelhouse(links: list[str]) -> dict[str, Any]:
    """The torch wheel names that ``links`` (find-links directories or pages) hold, and
    one error line per link that could not be read (its address masked)."""
    names: list[str] = []
    errors: list[str] = []
    for link in links:
        parts = urlsplit(link)
        shown = link
        if parts.username or parts.password:
            shown = link.replace(parts.netloc, "***@" + parts.netloc.rsplit("@", 1)[-1])
        try:
            if link.startswith("/") or parts.scheme == "file":
                found = os.listdir(unquote(parts.path) if parts.scheme == "file" else link)
            else:
                found = _page_names(link)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            errors.append(f"{shown}: {type(exc).__name__}: {reason}")
            continue
        names += [n for n in found if _TORCH_WHEEL.match(n)]
    return {"names": sorted(set(names)), "errors": errors}


def facts(do_import: bool) -> dict[str, Any]:
    dist: str | None
    try:
        dist = metadata.version("torch")
    except metadata.PackageNotFoundError:
        dist = None
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    out: dict[str, Any] = {"python": python, "dist": dist, "version": None, "cuda": None}
    if dist is not None:
        out.update(_version_file_facts())
        if do_import:
            out.update(_imported_facts())
    return out


if __name__ == "__main__":
    answer = facts("--import" in sys.argv[1:])
    if "--find-links" in sys.argv[1:]:
        answer["wheelhouse"] = wheelhouse([str(x) for x in json.loads(sys.stdin.read() or "[]")])
    print(json.dumps(answer, sort_keys=True))
