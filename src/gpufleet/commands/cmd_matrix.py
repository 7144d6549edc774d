"""`gpufleet matrix`: print the support matrix, or refresh it inside README.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpufleet.errors import GpufleetError
from gpufleet.planning.matrix import render_markdown, update_readme


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("matrix", help="print the torch/CUDA/driver support matrix (Markdown)")
    p.add_argument(
        "--update-readme",
        metavar="PATH",
        help="rewrite the generated block between the support-matrix markers",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="with --update-readme: exit 1 if the file is out of date",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.update_readme:
        print(render_markdown())
        return 0
    path = Path(args.update_readme)
    try:
        old = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise GpufleetError(f"--update-readme {path}: cannot read it ({reason})") from None
    try:
        new = update_readme(old)
    except ValueError as exc:
        raise GpufleetError(f"{path}: {exc}") from None
    if args.check:
        if new != old:
            raise GpufleetError(f"{path}: support matrix is out of date; run `make matrix`")
        return 0
    if new != old:
        try:
            path.write_text(new, encoding="utf-8")
        except OSError as exc:
            raise GpufleetError(
                f"--update-readme {path}: cannot write it ({exc.strerror})"
            ) from None
        print(f"{path}: support matrix updated")
    return 0
