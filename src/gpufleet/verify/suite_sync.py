"""The node suites (checks/, smoke_tests/) on a node in one command, and only when they changed.

verify used to copy the suites with ``ansible.builtin.copy`` of two directories: a module
run per file, about 10 s per ``make verify`` on the testbed before any check ran. Now the
``gpufleet.core.sync_suites`` action builds one gzipped tar on the controller
(:func:`build`) and runs

    <env python> -m gpufleet.verify.suite_sync install DEST --digest D   (the tar, base64, on stdin)

on the node once: when ``DEST/.gpufleet-suites.digest`` already says ``D`` (the same files,
modes and contents), nothing is written; otherwise each suite directory is replaced whole
(written beside it, then renamed in), and the digest is written last. The node trusts
nothing in the tar either: only regular files and directories under the named suites, no
absolute paths, no ``..``, no links.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import io
import os
import shutil
import stat
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

DIGEST_FILE = ".gpufleet-suites.digest"
_SKIP = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


class SyncError(ValueError):
    """The tar or the destination is not what the sync accepts."""


def _files(root: Path, name: str) -> list[tuple[str, Path]]:
    top = root / name
    if not top.is_dir():
        raise SyncError(f"{top} is not a directory")
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP)
        for f in sorted(filenames):
            p = Path(dirpath) / f
            if f.endswith((".pyc", ".pyo")) or not p.is_file() or p.is_symlink():
                continue
            out.append((p.relative_to(root).as_posix(), p))
    return out


def build(root: Path, names: Sequence[str]) -> tuple[bytes, str]:
    """(gzipped tar of the named directories under root, digest of names, modes and contents)."""
    h = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for name in sorted(names):
            for rel, path in _files(root, name):
                data = path.read_bytes()
                st = path.stat()
                mode = stat.S_IMODE(st.st_mode) & 0o755
                h.update(f"{rel}\0{mode:o}\0{len(data)}\0".encode())
                h.update(data)
                info = tarfile.TarInfo(rel)
                info.size = len(data)
                info.mode = mode
                info.mtime = int(st.st_mtime)  # kept: Python's .pyc checks use it
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), h.hexdigest()


def _safe_member(m: tarfile.TarInfo, names: set[str]) -> str | None:
    """Why the member is refused, or None."""
    p = PurePosixPath(m.name)
    if p.is_absolute() or ".." in p.parts or not p.parts or p.parts[0] not in names:
        return f"{m.name!r}: not a path under {sorted(names)}"
    if not (m.isreg() or m.isdir()):
        return f"{m.name!r}: not a regular file or directory"
    return None


def install(dest: Path, blob: bytes, digest: str, names: Sequence[str]) -> str:
    """Put the tar's suites under dest unless its digest is already there; 'unchanged' or
    'installed'."""
    stamp = dest / DIGEST_FILE
    try:
        if stamp.read_text(encoding="utf-8").strip() == digest and all(
            (dest / n).is_dir() for n in names
        ):
            return "unchanged"
    except OSError:
        pass
    wanted = set(names)
    dest.mkdir(mode=0o755, parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".sync-", dir=dest))
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
                members = tar.getmembers()
                bad = [w for w in (_safe_member(m, wanted) for m in members) if w]
                if bad:
                    raise SyncError("refused: " + "; ".join(bad[:5]))
                for m in members:
                    target = work / m.name
                    if m.isdir():
                        target.mkdir(mode=0o755, parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                    src = tar.extractfile(m)
                    if src is None:  # pragma: no cover - regular members have data
                        continue
                    with open(target, "wb") as fh:
                        shutil.copyfileobj(src, fh)
                    os.chmod(target, m.mode & 0o755 | 0o644)
                    os.utime(target, (m.mtime, m.mtime))
        except (tarfile.TarError, EOFError) as exc:
            raise SyncError(f"the suites tar is broken: {exc}") from exc
        stamp.unlink(missing_ok=True)
        for n in sorted(wanted):
            new = work / n
            new.mkdir(mode=0o755, exist_ok=True)
            old = dest / n
            trash = work / f".old-{n}"
            if old.exists() or old.is_symlink():
                os.rename(old, trash)
            os.rename(new, old)
        stamp.write_text(digest + "\n", encoding="utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "installed"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpufleet.verify.suite_sync", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("install", help="install the suites tar (base64 on stdin) under DEST")
    ins.add_argument("dest", type=Path)
    ins.add_argument("--digest", required=True)
    ins.add_argument("--name", action="append", required=True, help="a suite directory (repeat)")
    args = p.parse_args(argv)
    text = sys.stdin.read()
    try:
        blob = base64.b64decode(text.strip(), validate=True)
        print(install(args.dest, blob, args.digest, args.name))
    except (binascii.Error, ValueError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the destination: not writable, a file, a full disk
        print(f"ERROR: {args.dest}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
