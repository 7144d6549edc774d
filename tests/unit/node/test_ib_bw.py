"""gpufleet.node.ib_bw: ib_write_bw per active port between two nodes, run against a fake
ib_write_bw (a script on PATH that prints the recordings of tests/fixtures/perftest) and a
fake /sys/class/infiniband tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.node import ib_bw, ib_ports, perftest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "perftest"
ACTIVE = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "link_layer": "InfiniBand",
    "rate": "400 Gb/sec (4X NDR)",
}

FAKE = """#!/bin/sh
# a client (its last word the peer) of mlx5_1 prints the slow port's run; the first try of
# mlx5_0 finds no server yet (the client must try again)
dev=""; prev=""; last=""
for a in "$@"; do [ "$prev" = "-d" ] && dev=$a; prev=$a; last=$a; done
echo "$@" >> "$LOG"
case "$last" in
  --report_gbits|--use_cuda=*) cat "$FIXTURES/server-gdr.txt"; exit 0 ;;
esac
if [ "$dev" = mlx5_0 ] && [ ! -e "$LOG.tried" ]; then
  : > "$LOG.tried"; cat "$FIXTURES/connect-failed-client.txt"; exit 1
fi
if [ "$dev" = mlx5_1 ]; then cat "$FIXTURES/slow-port-gdr-client.txt"; else cat "$FIXTURES/h100-gdr-client.txt"; fi
"""


def sysfs(root: Path, ports: dict[str, dict[str, str]]) -> Path:
    for hca, files in ports.items():
        d = root / hca / "ports" / "1"
        d.mkdir(parents=True)
        for name, text in files.items():
            (d / name).write_text(text + "\n")
    return root


@pytest.fixture
def fake_perftest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    prog = bin_dir / "ib_write_bw"
    prog.write_text(FAKE)
    prog.chmod(0o755)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FIXTURES", str(FIXTURES))
    monkeypatch.setenv("LOG", str(log))
    monkeypatch.setattr(ib_bw, "RETRY_S", 0.05)
    monkeypatch.setattr(ib_bw, "gpus_here", lambda: 8)
    monkeypatch.setattr(ib_bw, "cuda_capable", lambda program=ib_bw.PROGRAM: True)
    return log


H100_FLOOR = perftest.PortFloor(
    "hgx-h100-8gpu", 375.0, "azurehpc-health-checks nd96isr_h100_v5.conf"
)


def test_a_node_without_an_rdma_device_is_a_skip(tmp_path: Path) -> None:
    out = ib_bw.run(
        "client",
        node="n1",
        peer_node="n2",
        peer_addr="10.0.0.2",
        base_port=18515,
        duration_s=1,
        timeout_s=5,
        floor=None,
        sysfs=tmp_path / "none",
    )
    (rec,) = out.records
    assert rec.status == "skip" and "no InfiniBand/RoCE HCA" in rec.message and not out.runs


def test_ports_but_no_perftest_is_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no ib_write_bw anywhere
    root = sysfs(tmp_path / "ib", {"mlx5_0": ACTIVE})
    out = ib_bw.run(
        "client",
        node="n1",
        peer_node="n2",
        peer_addr="10.0.0.2",
        base_port=18515,
        duration_s=1,
        timeout_s=5,
        floor=H100_FLOOR,
        sysfs=root,
    )
    (rec,) = out.records
    assert rec.status == "incomplete" and "dnf install perftest" in rec.remedy


def test_every_active_port_runs_at_once_and_is_judged(tmp_path: Path, fake_perftest: Path) -> None:
    down = {**ACTIVE, "state": "1: DOWN", "phys_state": "2: Polling"}
    root = sysfs(tmp_path / "ib", {"mlx5_0": ACTIVE, "mlx5_1": ACTIVE, "mlx5_2": down})
    out = ib_bw.run(
        "client",
        node="n1",
        peer_node="n2",
        peer_addr="10.0.0.2",
        base_port=18515,
        duration_s=5,
        timeout_s=20,
        floor=H100_FLOOR,
        sysfs=root,
        modules=["nvidia_peermem"],
        registered=["nv_mem"],
    )
    got = {r.name: r for r in out.records}
    assert sorted(got) == ["ib_write_bw:mlx5_0:1", "ib_write_bw:mlx5_1:1"]  # the DOWN port: none
    assert (
        got["ib_write_bw:mlx5_0:1"].status == "pass" and got["ib_write_bw:mlx5_0:1"].value == 391.42
    )
    assert (
        got["ib_write_bw:mlx5_1:1"].status == "fail" and got["ib_write_bw:mlx5_1:1"].value == 181.36
    )
    calls = fake_perftest.read_text().splitlines()
    # mlx5_0 was refused once (no server yet) and tried again; each NIC its own TCP port and GPU
    assert sum("-d mlx5_0" in c for c in calls) == 2
    assert any(
        "-d mlx5_1 -i 1 -p 18516 -D 5 -F --report_gbits --use_cuda=1 10.0.0.2" in c for c in calls
    )


def test_without_peermem_the_ports_write_from_host_memory(
    tmp_path: Path, fake_perftest: Path
) -> None:
    root = sysfs(tmp_path / "ib", {"mlx5_0": ACTIVE})
    out = ib_bw.run(
        "server",
        node="n2",
        peer_node="n1",
        peer_addr="10.0.0.1",
        base_port=18515,
        duration_s=5,
        timeout_s=10,
        floor=None,
        sysfs=root,
        modules=[],
        registered=[],
    )
    assert out.records == []  # the server judges nothing
    (run,) = out.runs
    assert run["argv"] == [
        "ib_write_bw",
        "-d",
        "mlx5_0",
        "-i",
        "1",
        "-p",
        "18515",
        "-D",
        "5",
        "-F",
        "--report_gbits",
    ]


def test_the_nics_in_name_order_each_with_its_gpu() -> None:
    ports = ib_ports.ports_from_raw({"mlx5_1": {"1": ACTIVE}, "mlx5_0": {"1": ACTIVE}})
    nics = ib_bw.nics(ports, 20000, gpus=1, gpudirect=True)
    assert [(n.hca, n.tcp_port, n.gpu) for n in nics] == [
        ("mlx5_0", 20000, 0),
        ("mlx5_1", 20001, 0),
    ]
    assert [n.gpu for n in ib_bw.nics(ports, 20000, gpus=8, gpudirect=False)] == [None, None]
