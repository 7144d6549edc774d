"""``gpufleet dcgm diag --level N --timeout S --output FILE``: run NVIDIA DCGM's
diagnostics (``dcgmi diag -r N -j``) with a bound on its time and write one record per DCGM
test as a ResultFile of kind ``dcgm`` (gpufleet.node.dcgm). Exit 0 when no record fails, 1 when
one does, 3 when none fails but DCGM could not judge (dcgmi missing or killed at --timeout:
one ``incomplete`` record); a node without an NVIDIA GPU on the PCI bus gets one ``skip``
record.

verify runs it on every node when ``gpufleet_dcgm`` (``verify_dcgm``) is true; levels 1-4 go
from seconds to tens of minutes (DCGM user guide, diagnostics)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import socket
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.node import dcgm
from gpufleet.node import facts as nodefacts
from gpufleet.node.health._common import rec
from gpufleet.results import ResultFile, exit_code


def register(sub: Any) -> None:
    p = add_command(sub, "dcgm", "DCGM diagnostics (dcgmi diag) into a result file", __doc__)
    s = p.add_subparsers(dest="dcgm_cmd", metavar="SUBCOMMAND", required=True)
    d = s.add_parser("diag", help="run dcgmi diag -r LEVEL -j with a time limit")
    d.add_argument("--level", type=argtypes.int_range(1, 4), default=1, help="1-4 (default 1)")
    d.add_argument("--timeout", type=argtypes.timeout_s, default=600.0, help="seconds")
    d.add_argument("--node", default=socket.gethostname(), help="node name in the records")
    d.add_argument("--output", type=argtypes.text, required=True, help="ResultFile to write")
    d.add_argument("--log", type=argtypes.text, default=None, help="also keep dcgmi's output here")
    d.add_argument("--dcgmi", type=argtypes.text, default="dcgmi", help="dcgmi program (PATH)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    gpus = nodefacts.pci_nvidia_gpus()
    if gpus == 0:
        result = dcgm.DiagRun(args.level)
        result.records.append(
            rec(dcgm.DCGM_DIAG, "skip", "no NVIDIA GPU on the PCI bus: nothing for DCGM to test")
        )
    else:
        result = dcgm.run_diag(args.level, args.timeout, args.dcgmi)
    records = [dataclasses.replace(r, node=args.node) for r in result.records]
    ResultFile(
        kind="dcgm",
        node=args.node,
        mode="gpu" if gpus else "cpu",
        started=started,
        duration_s=result.seconds,
        records=records,
        meta={"level": args.level, "timeout_s": args.timeout, "returncode": result.returncode},
    ).write(args.output)
    if args.log:
        Path(args.log).write_text(result.output, encoding="utf-8")
    for r in records:
        print(f"{r.status.upper():4} {r.name}: {r.message}")
    return exit_code(records)
