"""perftest's ``ib_write_bw`` output, and its verdict per NIC (pure functions).

``ib_write_bw`` (linux-rdma/perftest) prints a banner (the test, ``Device : mlx5_0``, ``Link
type``), with ``--use_cuda=N`` the CUDA lines (``[pid = ..., dev = N] device name = [...]``,
``cuMemAlloc() of a ... bytes GPU buffer``: the buffer is GPU memory, GPUDirect RDMA), then
one result line under::

     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]

``--report_gbits`` makes the unit Gb/s (10^9 bits); without it perftest prints MB/sec, which
:func:`parse` refuses (the runner always asks for Gb/s) rather than guess perftest's
megabyte. With ``-D`` (a duration) the peak is not measured and prints 0.00.

:func:`judge` holds one NIC's average against the system profile's
``floors.ib_write_bw_gdr_gbps`` (Azure's check_ib_bw_gdr: 375 Gb/s per 400G port on ND H100
v5, 360 on H200, 185 on A100; acceptance facts §9). That floor is for GPU memory: a run from
host memory (no nvidia-peermem, a perftest built without CUDA) is reported with its figure
and not judged against it, saying why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.results import Record, Status

NAME = "ib_write_bw"
FLOOR_FIELD = "ib_write_bw_gdr_gbps"
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+BW average\[")
_ROW = re.compile(
    r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>\d+(?:\.\d+)?)\s+(?P<avg>\d+(?:\.\d+)?)"
    r"(?:\s+(?P<rate>\d+(?:\.\d+)?))?\s*$"
)
_DEVICE = re.compile(r"Device\s*:\s*(?P<dev>\S+)")
_LINK = re.compile(r"Link type\s*:\s*(?P<link>\S+)")
_CUDA_NAME = re.compile(r"device name = \[(?P<name>[^\]]*)\]")
_ERROR = re.compile(
    r"(couldn't|could not|unable|fail|error|not supported|no ib devices|timed out)", re.I
)
REMEDY_FAIL = (
    "ib_write_bw could not run between these ports: check both ports (ibstat: State Active, "
    "Physical state LinkUp), the subnet manager, and that the peer's port is reachable "
    "(ibping / ib_write_bw by hand with the same options, shown in the result's meta)"
)
REMEDY_SLOW = (
    "this port moves less than its floor: check its rate (ibstat), the cable and "
    "transceiver, the switch port's counters (perfquery), PCIe of the HCA (lspci -vvv: "
    "LnkSta), and GPUDirect RDMA (nvidia-peermem, the NIC and GPU under one PCIe switch)"
)


@dataclass(frozen=True)
class PerftestResult:
    """What one ``ib_write_bw`` run printed (None: not in the output)."""

    device: str | None = None
    link_type: str | None = None
    msg_bytes: int | None = None
    iterations: int | None = None
    peak_gbps: float | None = None
    average_gbps: float | None = None
    gpu_memory: bool = False  # the buffer was GPU memory (--use_cuda)
    cuda_device: str | None = None
    error: str = ""  # no result: the first line that says why


def parse(text: str) -> PerftestResult:
    """The result of one ``ib_write_bw`` run's output (client or server side)."""
    device = link = cuda_name = None
    unit = None
    row = None
    gpu = False
    first_error = ""
    for line in text.splitlines():
        if m := _DEVICE.search(line):
            device = device or m["dev"]
        if m := _LINK.search(line):
            link = link or m["link"]
        if m := _CUDA_NAME.search(line):
            cuda_name, gpu = m["name"], True
        if "GPU buffer" in line and "cuMemAlloc" in line:
            gpu = True
        if m := _HEADER.search(line):
            unit = m["unit"]
            continue
        if unit is not None and row is None and (m := _ROW.match(line)):
            row = m
        if not first_error and _ERROR.search(line) and "WARNING" not in line:
            first_error = line.strip()
    base = PerftestResult(device, link, gpu_memory=gpu, cuda_device=cuda_name)
    if row is None:
        why = first_error or "no result line (the output ends before the bandwidth table)"
        return PerftestResult(**{**base.__dict__, "error": why})
    if unit != "Gb/sec":
        return PerftestResult(
            **{
                **base.__dict__,
                "error": f"bandwidth in {unit}: run ib_write_bw with --report_gbits",
            }
        )
    return PerftestResult(
        device,
        link,
        int(row["bytes"]),
        int(row["iters"]),
        float(row["peak"]),
        float(row["avg"]),
        gpu,
        cuda_name,
    )


@dataclass(frozen=True)
class PortFloor:
    """The profile's per-port floor (None: no public figure, ``note`` says why)."""

    profile: str
    value: float | None
    source: str = ""
    note: str = ""


def judge(
    node: str, peer: str, hca: str, result: PerftestResult, floor: PortFloor | None
) -> Record:
    """One NIC of ``node`` writing to ``peer``: fail on an error or below the floor; not
    judged (skip, with the figure) without a floor or from host memory."""
    name = f"{NAME}:{hca}"
    where = f"{node} {hca} -> {peer}"
    if result.error:
        return Record(
            name,
            "fail",
            node=node,
            message=f"{where}: ib_write_bw failed: {result.error}",
            remedy=REMEDY_FAIL,
        )
    avg = result.average_gbps
    mem = f"GPU memory ({result.cuda_device})" if result.gpu_memory else "host memory"
    figure = f"{avg:g} Gb/s average from {mem}, {result.msg_bytes} B messages"
    if floor is None:
        return Record(
            name,
            "skip",
            node=node,
            value=avg,
            message=f"{where}: {figure}; no system profile: no floor",
        )
    if floor.value is None:
        return Record(
            name,
            "skip",
            node=node,
            value=avg,
            message=f"{where}: {figure}; profile {floor.profile} has no "
            f"{FLOOR_FIELD} floor ({floor.note})",
        )
    if not result.gpu_memory:
        return Record(
            name,
            "skip",
            node=node,
            value=avg,
            threshold=floor.value,
            message=f"{where}: {figure}; the floor {floor.value:g} Gb/s (profile "
            f"{floor.profile}) is for GPUDirect RDMA: not judged from host memory (no "
            "nvidia-peermem registered, or a perftest built without CUDA)",
        )
    status: Status = "pass" if avg is not None and avg >= floor.value else "fail"
    return Record(
        name,
        status,
        node=node,
        value=avg,
        threshold=floor.value,
        message=f"{where}: {figure} {'>=' if status == 'pass' else 'is below'} "
        f"{floor.value:g} Gb/s (profile {floor.profile}: {floor.source})",
        remedy=REMEDY_SLOW if status == "fail" else "",
    )
