"""``gpufleet nvml record [--full] [--output FILE]``: print or save this node's NVML
readings (gpufleet.node.nvml); exit 1 when NVML cannot start.

The recording replays through ``pytest checks --nvml-recording FILE``."""

# ruff: noqa: PLC0415  (NVML and torch are imported lazily on purpose)

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gpufleet.commands import add_command


def register(sub: Any) -> None:
    p = add_command(
        sub, "nvml", "record this node's NVML readings (for replaying the checks)", __doc__
    )
    nsub = p.add_subparsers(dest="nvml_cmd", metavar="SUBCOMMAND", required=True)
    r = nsub.add_parser("record", help="print or save a recording of this node")
    r.add_argument("-o", "--output", metavar="FILE", help="write the recording to FILE")
    r.add_argument(
        "--full",
        action="store_true",
        help="also record the other facts the checks read (torch, kernel modules, nvcc, "
        "NVIDIA GPUs on the PCI bus, CUDA_VISIBLE_DEVICES, NVRM kernel log lines, the "
        "fabric/network sections), so the whole suite can replay this node with "
        "--nvml-recording",
    )
    r.set_defaults(func=run_record)


def run_record(args: argparse.Namespace) -> int:
    from gpufleet.node.nvml import open_reader, record_node

    with open_reader() as reader:
        data = record_node(reader)
    if args.full:
        from gpufleet.node import nvswitch as fabric
        from gpufleet.node.facts import record_facts  # imports torch

        data.update(record_facts())
        data.update(fabric.record_facts())
    text = json.dumps(data, indent=2) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0 if "error" not in data["nvml"] else 1
