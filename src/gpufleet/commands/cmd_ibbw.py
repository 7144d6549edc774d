"""``gpufleet ibbw --role server|client --peer ADDR --output FILE``: perftest's ``ib_write_bw``
between this node and its pair's peer, one process per active InfiniBand/RoCE port, all at
once (gpufleet.node.ib_bw), with GPUDirect RDMA where the node has it.

verify's IB step runs it on both nodes of each pair of its pair rounds: the second node as
server, the first as client. The client judges each NIC's average (Gb/s) against the system
profile's ``floors.ib_write_bw_gdr_gbps`` (``--system-profile``, ``--profiles-dir``, chosen
as the node check ``profile`` chooses it) and writes the result file; a node without an
active port writes one skip record. Exit 0 when no record fails, 1 when one does, 3 when
the test could not run (ports but no perftest).
"""

# ruff: noqa: PLC0415  (NVML is imported lazily on purpose)

from __future__ import annotations

import argparse
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.errors import GpufleetError
from gpufleet.node import ib_bw, ib_ports, perftest
from gpufleet.results import ResultFile, exit_code, utc_stamp


def register(sub: Any) -> None:
    p = add_command(sub, "ibbw", "ib_write_bw per NIC between two nodes (perftest)", __doc__)
    p.add_argument("--role", choices=("server", "client"), required=True)
    p.add_argument("--peer", type=argtypes.text, required=True, help="the peer's address")
    p.add_argument("--peer-node", type=argtypes.text, default=None, help="the peer's name")
    p.add_argument("--node", type=argtypes.text, default=socket.gethostname())
    p.add_argument(
        "--base-port",
        type=argtypes.int_range(1, 65000),
        default=ib_bw.DEFAULT_BASE_PORT,
        help="TCP port of the first NIC's exchange; NIC i uses base + i",
    )
    p.add_argument(
        "--duration",
        type=argtypes.int_range(1, 600),
        default=5,
        help="seconds each ib_write_bw runs (-D, default 5)",
    )
    p.add_argument(
        "--timeout",
        type=argtypes.timeout_s,
        default=60.0,
        help="seconds for the whole exchange, the server's start included",
    )
    p.add_argument("--system-profile", type=argtypes.text, default="auto")
    p.add_argument("--profiles-dir", type=argtypes.text, default=None)
    p.add_argument("--kind", type=argtypes.text, default="ibbw", help="result file kind")
    p.add_argument(
        "--output",
        type=argtypes.text,
        default=None,
        help="result file (the client's verdicts; the server's runs)",
    )
    p.set_defaults(func=run)


def port_floor(name: str, profiles_dir: str | None) -> perftest.PortFloor | None:
    """The profile's per-port floor, the profile chosen as the node check chooses it."""
    from gpufleet.node import profiles

    try:
        prof = profiles.select_here(name, profiles_dir)
    except GpufleetError:
        return None
    fig = prof.floor(perftest.FLOOR_FIELD)
    value = None if fig.value is None else float(fig.value)
    return perftest.PortFloor(prof.name, value, fig.source, fig.note)


def _modules() -> list[str]:
    try:
        text = Path("/proc/modules").read_text(encoding="utf-8")
    except OSError:
        return []
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def run(args: argparse.Namespace) -> int:
    started = datetime.now(timezone.utc)
    t0 = time.monotonic()
    floor = port_floor(args.system_profile, args.profiles_dir) if args.role == "client" else None
    outcome = ib_bw.run(
        args.role,
        node=args.node,
        peer_node=args.peer_node or args.peer,
        peer_addr=args.peer,
        base_port=args.base_port,
        duration_s=args.duration,
        timeout_s=args.timeout,
        floor=floor,
        modules=_modules(),
        registered=ib_ports.read_memory_peers(),
    )
    if args.output:
        ResultFile(
            kind=args.kind,
            node=args.node,
            mode="gpu" if ib_bw.gpus_here() else "cpu",
            started=utc_stamp(started),
            duration_s=time.monotonic() - t0,
            records=outcome.records,
            meta={
                "role": args.role,
                "peer": args.peer_node or args.peer,
                "runs": outcome.runs,
                "floor_profile": floor.profile if floor else None,
            },
        ).write(args.output)
    for r in outcome.records:
        print(f"{r.status.upper():4} {r.name}: {r.message}")
    return exit_code(outcome.records)
