"""One round trip for a node's verify results: pack them on the node, unpack them on the
controller.

verify used to list a node's result files (a ``find`` module run) and fetch them one by one
(a ``fetch`` per file, each a module run and a copy), then give the node's lock back (one
more module run): five to seven round trips per node after every launch. The
``gpufleet.core.fetch_results`` action now runs

    <env python> -m gpufleet.verify.result_pack pack RUN_DIR --pattern '*.json' ... [--lock L
    --run-id R]

once per node: it prints one JSON object with the selected files as a gzipped tar (base64)
and, when asked, gives the node's verify lock back (only if this run holds it). The action
hands the text to :func:`unpack`, which trusts nothing in it: only regular files with plain
names that match the patterns are written, each within the size limit; anything else is
named in ``refused``.

Files are the top level of RUN_DIR only (as the find module did), symlinks never followed.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import fnmatch
import io
import json
import os
import shutil
import stat
import sys
import tarfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: A file larger than this is not packed (named in ``skipped``): verify's result files are
#: JSON, JUnit XML and bounded logs; a bigger one is not a result and must not fill memory.
MAX_FILE_BYTES = 64 * 1024 * 1024
FORMAT = "gpufleet-pack-1"


def selected(name: str, patterns: Sequence[str], excludes: Sequence[str]) -> bool:
    """A plain file name that matches one pattern and no exclude (fnmatch, case-sensitive)."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        return False
    if any(fnmatch.fnmatchcase(name, x) for x in excludes):
        return False
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def release_lock(lock: Path, run_id: str) -> bool:
    """Remove the verify lock directory when its owner file names ``run_id``; True if removed.
    A lock of another run (or none) is left alone."""
    try:
        owner = (lock / "owner").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False
    if not owner or owner[0] != run_id:
        return False
    shutil.rmtree(lock, ignore_errors=True)
    return not lock.exists()


def pack(
    run_dir: Path,
    patterns: Sequence[str],
    excludes: Sequence[str] = (),
    max_bytes: int = MAX_FILE_BYTES,
) -> dict[str, Any]:
    """{format, files, skipped, tar} for the matching regular files of ``run_dir``'s top
    level; ``tar`` is a gzipped tar in base64 (empty when no file matched)."""
    files: list[str] = []
    skipped: list[dict[str, Any]] = []
    buf = io.BytesIO()
    try:
        names = sorted(os.listdir(run_dir))
    except FileNotFoundError:
        names = []
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for name in names:
            if not selected(name, patterns, excludes):
                continue
            path = run_dir / name
            try:
                st = path.lstat()
            except OSError as exc:
                skipped.append({"name": name, "why": str(exc)})
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append({"name": name, "why": "not a regular file"})
                continue
            if st.st_size > max_bytes:
                skipped.append(
                    {"name": name, "why": f"{st.st_size} bytes, over the {max_bytes} limit"}
                )
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                skipped.append({"name": name, "why": str(exc)})
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = int(st.st_mtime)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
            files.append(name)
    return {
        "format": FORMAT,
        "files": files,
        "skipped": skipped,
        "tar": base64.b64encode(buf.getvalue()).decode("ascii") if files else "",
    }


@dataclass
class Unpacked:
    written: list[str] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    released: bool = False


class PackError(ValueError):
    """The node's answer is not a pack (a broken env, an old gpufleet, a truncated output)."""


def parse(text: str) -> dict[str, Any]:
    """The pack object from the node's stdout (its last non-empty line)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise PackError("the node printed nothing")
    try:
        obj = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise PackError(f"the node's answer is not JSON ({exc.msg}): {lines[-1][:200]!r}") from exc
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise PackError(f"the node's answer is not a {FORMAT} object: {lines[-1][:200]!r}")
    return obj


def unpack(
    obj: dict[str, Any],
    dest: Path,
    patterns: Sequence[str],
    excludes: Sequence[str] = (),
    max_bytes: int = MAX_FILE_BYTES,
) -> Unpacked:
    """Write the pack's files into ``dest`` (created), checking every member again here: a
    regular file, a plain name matching the patterns, within ``max_bytes``. Existing files
    of the same name are replaced."""
    out = Unpacked(
        skipped=[s for s in obj.get("skipped") or [] if isinstance(s, dict)],
        released=obj.get("released") is True,
    )
    blob = obj.get("tar") or ""
    if not blob:
        return out
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PackError(f"the pack's tar is not base64: {exc}") from exc
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
            for m in tar:
                if not m.isreg():
                    out.refused.append({"name": m.name, "why": "not a regular file"})
                    continue
                if not selected(m.name, patterns, excludes):
                    out.refused.append(
                        {"name": m.name, "why": "not a plain name the patterns select"}
                    )
                    continue
                if m.size > max_bytes:
                    out.refused.append({"name": m.name, "why": f"{m.size} bytes, over the limit"})
                    continue
                src = tar.extractfile(m)
                if src is None:  # pragma: no cover - isreg() members always have data
                    continue
                target = dest / m.name
                tmp = dest / f".{m.name}.part"
                with open(tmp, "wb") as fh:
                    shutil.copyfileobj(src, fh)
                os.replace(tmp, target)
                out.written.append(m.name)
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # the controller's own disk (gzip's BadGzipFile has no errno)
        raise PackError(f"the pack's tar is broken: {exc}") from exc
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpufleet.verify.result_pack", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="print the run directory's result files as one JSON line")
    pk.add_argument("run_dir", type=Path)
    pk.add_argument("--pattern", action="append", default=[], help="fnmatch pattern (repeat)")
    pk.add_argument("--exclude", action="append", default=[], help="fnmatch pattern (repeat)")
    pk.add_argument("--max-bytes", type=int, default=MAX_FILE_BYTES)
    pk.add_argument("--lock", type=Path, help="verify lock directory to give back after packing")
    pk.add_argument("--run-id", default="", help="the run whose lock --lock may remove")
    args = p.parse_args(argv)
    obj = pack(args.run_dir, args.pattern, args.exclude, args.max_bytes)
    obj["released"] = bool(args.lock and args.run_id and release_lock(args.lock, args.run_id))
    sys.stdout.write(json.dumps(obj) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
