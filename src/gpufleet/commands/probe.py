"""``gpufleet probe serve|connect``: the TCP pre-check of make verify (gpufleet.netprobe)."""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    from gpufleet import netprobe

    p: argparse.ArgumentParser = sub.add_parser(
        "probe",
        help="TCP reachability pre-check between nodes (rendezvous + mesh)",
        description=netprobe.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    netprobe.add_arguments(p)
    p.set_defaults(func=netprobe.run)
