"""``gpufleet report reports/<run-id>``: summary.json, summary.md, bandwidth.png, table.

Exit code 1 when any record failed (docs/architecture.md)."""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from gpufleet import report

    p: argparse.ArgumentParser = sub.add_parser(
        "report",
        help="aggregate a verify run into summary.json/md and bandwidth.png",
        description=report.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_arguments(p)
    p.set_defaults(func=report.run)
