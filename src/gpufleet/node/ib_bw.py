"""``ib_write_bw`` between two nodes, one process per NIC, all NICs at once (verify's IB step).

Two nodes of a pair run :func:`run`: the pair's second node as ``server`` (one
``ib_write_bw`` per active port, each on its own TCP port ``base_port + i`` for perftest's
out-of-band exchange), the first as ``client`` (the same per port, connecting to the server's
cluster address; rail i to rail i, in the order of the ports' names). A client retries while
the server is not listening yet, up to the deadline. GPUDirect RDMA where this node has it:
NVIDIA GPUs, ``nvidia-peermem`` loaded and registered (gpufleet.node.ib_ports), and a perftest
built with CUDA (``--use_cuda`` in its help): the NIC i then writes from GPU ``i mod GPUs``.

The client judges each NIC (:func:`gpufleet.node.perftest.judge`) against the profile's
``floors.ib_write_bw_gdr_gbps`` and returns the records; a node without an active port, or
without ``ib_write_bw``, says so in one record (skip without HCA; incomplete when HCAs are
there but perftest is not: the acceptance asked for cannot be done).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.node import ib_ports, perftest
from gpufleet.results import Record

PROGRAM = "ib_write_bw"
#: perftest's own default port for its out-of-band exchange
DEFAULT_BASE_PORT = 18515
#: how long a client waits between tries while its server is not listening yet
RETRY_S = 1.0
NO_PERFTEST = (
    "install perftest on the node (EL: dnf install perftest; add it to infiniband_packages; "
    "DOCA-OFED's build for GPUDirect RDMA), or set verify_ib_bw: false"
)


@dataclass(frozen=True)
class Nic:
    """One active port and the GPU its ib_write_bw writes from (None: host memory)."""

    hca: str
    port: str
    tcp_port: int
    gpu: int | None

    def argv(self, duration_s: int, peer: str | None) -> list[str]:
        out = [
            PROGRAM,
            "-d",
            self.hca,
            "-i",
            self.port,
            "-p",
            str(self.tcp_port),
            "-D",
            str(duration_s),
            "-F",
            "--report_gbits",
        ]
        if self.gpu is not None:
            out.append(f"--use_cuda={self.gpu}")
        return out + ([peer] if peer else [])


@dataclass
class Outcome:
    records: list[Record] = field(default_factory=list)
    runs: list[dict[str, object]] = field(default_factory=list)  # argv, rc, output tail


def gpus_here(proc_root: Path = Path("/proc/driver/nvidia/gpus")) -> int:
    try:
        return sum(1 for _ in proc_root.iterdir())
    except OSError:
        return 0


def cuda_capable(program: str = PROGRAM) -> bool:
    """Whether this perftest was built with CUDA (its help lists --use_cuda)."""
    try:
        out = subprocess.run(
            [program, "--help"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "use_cuda" in out.stdout + out.stderr


def gpudirect_here(modules: Sequence[str], registered: Sequence[str], gpus: int) -> bool:
    return bool(gpus) and any(m in modules for m in ib_ports.PEERMEM_MODULES) and bool(registered)


def nics(ports: Sequence[ib_ports.IbPort], base_port: int, gpus: int, gpudirect: bool) -> list[Nic]:
    """The active ports in name order, each with its TCP port and GPU."""
    active = [p for p in ports if p.active]
    return [
        Nic(p.hca, p.port, base_port + i, (i % gpus) if gpudirect and gpus else None)
        for i, p in enumerate(sorted(active, key=lambda p: p.name))
    ]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _run_all(
    argvs: Sequence[list[str]], deadline: float, retry: bool
) -> list[tuple[int | None, str]]:
    """Every argv at once; a client (``retry``) whose server was not up yet tries again until
    the deadline. (rc, output) each; rc None when it was stopped at the deadline."""
    results: list[tuple[int | None, str]] = [(None, "")] * len(argvs)
    pending = list(range(len(argvs)))
    while pending:
        procs = {
            i: subprocess.Popen(
                argvs[i], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for i in pending
        }
        again = []
        for i, p in procs.items():
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
                results[i] = (None, (out or "") + "\n(stopped at the deadline)")
                continue
            results[i] = (p.returncode, out or "")
            refused = (
                "couldn't connect" in (out or "").lower() or "unable to open" in (out or "").lower()
            )
            if retry and p.returncode != 0 and refused and time.monotonic() + RETRY_S < deadline:
                again.append(i)
        pending = again
        if pending:
            time.sleep(RETRY_S)
    return results


def run(
    role: str,
    *,
    node: str,
    peer_node: str,
    peer_addr: str,
    base_port: int,
    duration_s: int,
    timeout_s: float,
    floor: perftest.PortFloor | None,
    sysfs: Path = Path("/sys/class/infiniband"),
    modules: Sequence[str] = (),
    registered: Sequence[str] = (),
) -> Outcome:
    """This node's side of the pair (``server`` or ``client``); the client's records."""
    out = Outcome()
    ports = ib_ports.ports_from_raw(ib_ports.read_ib_sysfs(sysfs))
    if not any(p.active for p in ports):
        why = "no InfiniBand/RoCE HCA" if not ports else "no active InfiniBand/RoCE port"
        out.records.append(
            Record(
                f"{perftest.NAME}:node",
                "skip",
                node=node,
                message=f"{node}: {why} ({sysfs}): no ib_write_bw",
            )
        )
        return out
    if shutil.which(PROGRAM) is None:
        out.records.append(
            Record(
                f"{perftest.NAME}:node",
                "incomplete",
                node=node,
                message=f"{node} has active RDMA ports but no {PROGRAM} (perftest) on its PATH",
                remedy=NO_PERFTEST,
            )
        )
        return out
    gpus = gpus_here()
    gdr = gpudirect_here(modules, registered, gpus) and cuda_capable()
    mine = nics(ports, base_port, gpus, gdr)
    argvs = [n.argv(duration_s, peer_addr if role == "client" else None) for n in mine]
    results = _run_all(argvs, time.monotonic() + timeout_s, retry=role == "client")
    for nic, argv, (rc, text) in zip(mine, argvs, results, strict=True):
        out.runs.append({"hca": nic.hca, "argv": argv, "rc": rc, "output": _tail(text)})
        if role != "client":
            continue
        result = perftest.parse(text)
        if rc not in (0, None) and not result.error:
            result = perftest.PerftestResult(error=f"exit code {rc}")
        out.records.append(perftest.judge(node, peer_node, f"{nic.hca}:{nic.port}", result, floor))
    return out
