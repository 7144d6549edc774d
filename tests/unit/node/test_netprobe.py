"""TCP pre-check (gpufleet.node.netprobe): reachable, refused, cause strings, result file."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.commands import cmd_probe
from gpufleet.errors import RefusedError
from gpufleet.node import netprobe
from gpufleet.node.netprobe import free_port


def test_parse_target_with_and_without_role() -> None:
    assert netprobe.parse_target("n1=10.0.0.1:29500:rendezvous") == netprobe.Target(
        "n1", "10.0.0.1", 29500, "rendezvous"
    )
    assert netprobe.parse_target("n2=host:1").role == "probe"
    with pytest.raises(RefusedError, match="NAME=HOST:PORT"):
        netprobe.parse_target("n1:29500")


@pytest.mark.parametrize(
    ("exc", "fragment"),
    [
        pytest.param(TimeoutError("timed out"), "DROP", id="timeout"),
        pytest.param(
            ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "nothing listens", id="refused"
        ),
        pytest.param(OSError(errno.EHOSTUNREACH, "No route to host"), "firewalld", id="no-route"),
        pytest.param(
            OSError(errno.ENETUNREACH, "Network is unreachable"), "interface", id="net-unreachable"
        ),
        pytest.param(socket.gaierror(-2, "Name or service not known"), "resolve", id="dns"),
    ],
)
def test_cause_names_the_likely_reason(exc: BaseException, fragment: str) -> None:
    assert fragment in netprobe.cause_of(exc)


def test_serve_and_connect_reach_each_other(tmp_path: Path) -> None:
    port = free_port()
    accepted: list[int] = []
    t = threading.Thread(
        target=lambda: accepted.append(
            netprobe.serve("server", "127.0.0.1", [port], duration=10, expect=1)
        )
    )
    t.start()
    time.sleep(0.2)
    res = netprobe.probe(
        "client", [netprobe.Target("server", "127.0.0.1", port)], timeout=2, retries=3, delay=0.2
    )
    t.join(timeout=15)
    assert not t.is_alive(), "listener did not stop after the expected connection"
    assert accepted == [1]
    assert res[0].ok
    assert res[0].peer == "server"


def test_closed_port_is_named_as_a_blocked_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    out = tmp_path / "probe.json"
    t0 = time.monotonic()
    rc = main(
        [
            "probe",
            "connect",
            "--name",
            "a",
            "--timeout",
            "1",
            "--retries",
            "2",
            "--result-json",
            str(out),
            f"b=127.0.0.1:{port}:mesh",
        ]
    )
    assert time.monotonic() - t0 < 10
    assert rc == 1
    line = capsys.readouterr().out
    assert f"BLOCKED a -> b (127.0.0.1:{port}, mesh)" in line
    assert "nothing listens" in line
    data = json.loads(out.read_text())
    rec = data["records"][0]
    assert data["kind"] == "probe"
    assert rec["status"] == "fail"
    assert "firewall-cmd" in rec["remedy"]


def test_serve_refuses_a_busy_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        # held by this very process: the holder found is this pytest
        with pytest.raises(
            netprobe.PortInUse,
            match=f"probe port 127.0.0.1:{port} is already in use by PID {os.getpid()} ",
        ):
            netprobe.serve("n", "127.0.0.1", [port], duration=1)


def test_serve_is_bounded_by_its_duration() -> None:
    t0 = time.monotonic()
    assert netprobe.serve("n", "127.0.0.1", [free_port()], duration=0.5, expect=5) == 0
    assert time.monotonic() - t0 < 3


@pytest.fixture
def squatter() -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Another process listening on a port (as a squatter on the rendezvous port would)."""
    port = free_port()
    code = (
        "import socket,time; s=socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(4); print('up', flush=True); "
        "c,_=s.accept(); c.sendall(b'HTTP/1.0 200 OK\\r\\n'); time.sleep(30)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, "squatter-marker"], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    try:
        yield port, proc
    finally:
        proc.kill()
        proc.wait()


def test_port_holder_names_pid_and_command(squatter: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, proc = squatter
    holder = netprobe.port_holder(port)
    assert holder.startswith(f"PID {proc.pid} (") and f"s.bind(('127.0.0.1', {port}))" in holder
    assert netprobe.port_holder(free_port()) == ""


def test_serve_on_a_held_port_names_the_holder(
    squatter: tuple[int, subprocess.Popen[bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port, proc = squatter
    out = tmp_path / "probe-listen.json"
    rc = main(["probe", "serve", "--name", "n1", "--bind", "127.0.0.1", "--port", str(port),
               "--rendezvous-port", str(port), "--duration", "1", "--result-json", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert f"n1: rendezvous port 127.0.0.1:{port} is already in use by PID {proc.pid}" in err
    assert "gpufleet_rdzv_port" in err and "Traceback" not in err
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["status"] == "fail" and rec["name"] == f"listen 127.0.0.1:{port} (rendezvous)"
    assert str(proc.pid) in rec["value"]


def test_a_held_rendezvous_port_leaves_the_mesh_port_served(
    squatter: tuple[int, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """The master's rendezvous port is held: its mesh port is still served, so the peers'
    mesh probes pass and the report names only the held port (not "nothing listens")."""
    held, proc = squatter
    mesh = free_port()
    out = tmp_path / "probe-listen.json"
    rcs: list[int] = []
    t = threading.Thread(
        target=lambda: rcs.append(
            main(
                [
                    "probe",
                    "serve",
                    "--name",
                    "n1",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(mesh),
                    "--port",
                    str(held),
                    "--rendezvous-port",
                    str(held),
                    "--duration",
                    "10",
                    "--expect",
                    "1",
                    "--result-json",
                    str(out),
                ]
            )
        )
    )
    t.start()
    time.sleep(0.3)
    (r,) = netprobe.probe("n2", [netprobe.Target("n1", "127.0.0.1", mesh, "mesh")], 2, 3, 0.2)
    t.join(timeout=15)
    assert r.ok and r.peer == "n1"
    assert rcs == [1], "the held port fails the listener"
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["name"] == f"listen 127.0.0.1:{held} (rendezvous)" and str(proc.pid) in rec["value"]


def test_a_squatter_that_accepts_is_not_taken_for_the_listener(
    squatter: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, _ = squatter
    (r,) = netprobe.probe("n2", [netprobe.Target("n1", "127.0.0.1", port, "rendezvous")], 2, 1)
    assert not r.ok
    assert "answered 'HTTP/1.0 200 OK'" in r.error
    assert "another process holds port" in r.cause


@pytest.mark.parametrize(
    ("env", "ifaces", "bad"),
    [
        ({"NCCL_SOCKET_IFNAME": "=eth0"}, ["lo", "eth0"], []),
        ({"NCCL_SOCKET_IFNAME": "=eth1"}, ["lo", "eth0"], ["'eth1'"]),
        ({"NCCL_SOCKET_IFNAME": "eth"}, ["lo", "eth0"], []),  # prefix
        ({"NCCL_SOCKET_IFNAME": "ib,eth"}, ["lo", "eth0"], ["prefix 'ib'"]),
        ({"NCCL_SOCKET_IFNAME": "^docker"}, ["lo"], []),  # exclusion: nothing to check
        ({"GLOO_SOCKET_IFNAME": "bogus0"}, ["lo", "eth0"], ["GLOO_SOCKET_IFNAME='bogus0'"]),
        ({"GLOO_SOCKET_IFNAME": "eth"}, ["eth0"], ["interface 'eth'"]),  # gloo: exact names
        ({}, [], []),
    ],
)
def test_ifname_problems(env: dict[str, str], ifaces: list[str], bad: list[str]) -> None:
    problems = netprobe.ifname_problems(env, ifaces)
    assert len(problems) == len(bad), problems
    for p, word in zip(problems, bad, strict=True):
        assert word in p and "it has:" in p


def test_connect_checks_the_env_file_interfaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / "nccl.env"
    env.write_text("MASTER_PORT=29500\nGLOO_SOCKET_IFNAME=bogus0\n")
    out = tmp_path / "ifaces.json"
    rc = main(["probe", "connect", "--name", "n1", "--env-file", str(env),
               "--ifaces-json", str(out)])  # fmt: skip
    assert rc == 1
    assert "BLOCKED n1: GLOO_SOCKET_IFNAME='bogus0'" in capsys.readouterr().out
    (rec,) = json.loads(out.read_text())["records"]
    assert rec["status"] == "fail" and "bogus0" in rec["message"]


def _mesh_argv(name: str, addr: str, port: int, expect: int, out: Path, *targets: str) -> list[str]:
    return [
        sys.executable, "-m", "gpufleet", "probe", "mesh", "--name", name, "--bind", addr,
        "--port", str(port), "--duration", "30", "--expect", str(expect), "--start-window", "4",
        "--timeout", "1", "--retries", "2", "--pidfile", str(out / f"{name}.pid"),
        "--listen-result-json", str(out / f"{name}-listen.json"),
        "--result-json", str(out / f"{name}.json"), *targets,
    ]  # fmt: skip


def test_mesh_nodes_started_together_reach_each_other_and_end_at_once(tmp_path: Path) -> None:
    """What verify runs on every node at once: each serves, then probes the others, and
    ends as soon as it has seen every expected peer (not after --duration)."""
    port = free_port("127.0.0.1")
    a = _mesh_argv("a", "127.0.0.2", port, 1, tmp_path, f"b=127.0.0.3:{port}:mesh")
    b = _mesh_argv("b", "127.0.0.3", port, 1, tmp_path, f"a=127.0.0.2:{port}:mesh")
    t0 = time.monotonic()
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for argv in (a, b)]
    outs = [p.communicate(timeout=30)[0] for p in procs]
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "ok      a -> b" in outs[0] and "accepted 1 connection" in outs[0], outs[0]
    assert took < 10, f"the mesh waited {took:.1f} s although every peer had connected"
    assert json.loads((tmp_path / "a.json").read_text())["records"][0]["status"] == "pass"
    assert (tmp_path / "a.pid").read_text().strip().isdigit()


def test_mesh_names_a_blocked_peer_and_stops_listening_after_the_peers_tries(
    tmp_path: Path,
) -> None:
    """A peer that never comes: this node's probe of it is BLOCKED (exit 1) once the start
    window (4 s) is over, and the listener waits only as long as the peers' tries can last
    (window + 1 s x 3), not --duration (30 s)."""
    port, dead = free_port("127.0.0.1"), free_port("127.0.0.1")
    argv = _mesh_argv("a", "127.0.0.2", port, 1, tmp_path, f"gone=127.0.0.4:{dead}:mesh")
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert "BLOCKED a -> gone" in r.stdout, r.stdout
    assert 4 <= took < 15, f"the mesh took {took:.1f} s"


def test_mesh_waits_for_a_peer_that_starts_late_within_the_start_window(tmp_path: Path) -> None:
    """No barrier between the nodes' starts: b starts 2 s after a, and a's probe of b still
    passes (a refused connection is retried within the start window)."""
    port = free_port("127.0.0.1")
    a = _mesh_argv("a", "127.0.0.2", port, 1, tmp_path, f"b=127.0.0.3:{port}:mesh")
    b = _mesh_argv("b", "127.0.0.3", port, 1, tmp_path, f"a=127.0.0.2:{port}:mesh")
    pa = subprocess.Popen(a, stdout=subprocess.PIPE, text=True)
    time.sleep(2)
    pb = subprocess.Popen(b, stdout=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=30)[0] for p in (pa, pb)]
    assert [pa.returncode, pb.returncode] == [0, 0], outs


def test_mesh_with_a_started_file_waits_for_a_peer_as_late_as_the_controller_is(
    tmp_path: Path,
) -> None:
    """The controller started b 6 s after a (more than the old fixed window of 4 s): with
    --started-file, a retries the refused connection until the file appears (the controller's
    wait began: every node was started) plus --start-grace, so both pass."""
    port = free_port("127.0.0.1")
    started = tmp_path / "probe-mesh.waited"
    extra = ["--started-file", str(started), "--start-grace", "5"]
    a = _mesh_argv("a", "127.0.0.2", port, 1, tmp_path, f"b=127.0.0.3:{port}:mesh") + extra
    b = _mesh_argv("b", "127.0.0.3", port, 1, tmp_path, f"a=127.0.0.2:{port}:mesh") + extra
    a[a.index("--start-window") + 1] = "60"
    b[b.index("--start-window") + 1] = "60"
    pa = subprocess.Popen(a, stdout=subprocess.PIPE, text=True)
    time.sleep(6)
    pb = subprocess.Popen(b, stdout=subprocess.PIPE, text=True)
    started.touch()
    outs = [p.communicate(timeout=60)[0] for p in (pa, pb)]
    assert [pa.returncode, pb.returncode] == [0, 0], outs


def test_mesh_with_a_started_file_names_a_peer_that_never_came_soon_after_the_file(
    tmp_path: Path,
) -> None:
    """Every node was started (the file is there from the start) and a peer never listens: the
    probe is BLOCKED after --start-grace (2 s) and the peers' tries, far from --start-window
    (60 s) and --duration."""
    port, dead = free_port("127.0.0.1"), free_port("127.0.0.1")
    started = tmp_path / "probe-mesh.waited"
    started.touch()
    argv = _mesh_argv("a", "127.0.0.2", port, 1, tmp_path, f"gone=127.0.0.4:{dead}:mesh")
    argv[argv.index("--start-window") + 1] = "60"
    argv[argv.index("--duration") + 1] = "120"
    listening = tmp_path / "probe-listening"
    argv += ["--started-file", str(started), "--start-grace", "2", "--ready-file", str(listening)]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)
    took = time.monotonic() - t0
    assert r.returncode == 1 and "BLOCKED a -> gone" in r.stdout, r.stdout + r.stderr
    assert listening.exists(), "the mesh says when its listeners are bound (the start waits)"
    assert 2 <= took < 15, f"the mesh took {took:.1f} s"


def test_the_start_window_moves_to_the_started_file_and_never_past_its_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    marker = tmp_path / "waited"
    w = cmd_probe.StartWindow(start=100.0, window=60.0, started_file=str(marker), grace=15.0)
    assert w.until() == 160.0, "no file yet: the cap"
    clock[0] = 130.0
    marker.touch()
    assert w.until() == 145.0, "the file seen at 130: 15 s of grace"
    clock[0] = 150.0
    assert w.until() == 145.0, "the time it was first seen counts, not each look"
    late = cmd_probe.StartWindow(start=100.0, window=60.0, started_file=str(marker), grace=15.0)
    clock[0] = 155.0
    assert late.until() == 160.0, "seen at 155: the grace would pass the cap"
    fixed = cmd_probe.StartWindow(start=100.0, window=4.0, started_file="", grace=15.0)
    assert fixed.until() == 104.0, "no started file: the fixed window, as before"


def _res(target: str, ok: bool, ms: float, role: str = "mesh") -> netprobe.ProbeResult:
    return netprobe.ProbeResult(
        source="n0", target=target, host=f"10.0.0.{target[1:]}", port=29400, role=role, ok=ok,
        seconds=ms / 1000, error="" if ok else "TimeoutError: timed out",
        cause="" if ok else "packets dropped",
    )  # fmt: skip


def test_the_result_names_each_blocked_peer_and_folds_the_peers_that_answered() -> None:
    """A 1000-node mesh must not leave a million records: every peer that answered, per
    role, becomes one record naming the count and the slowest; a blocked peer keeps its own."""
    results = [_res(f"n{i}", True, float(i)) for i in range(1, 200)]
    results.insert(50, _res("n999", False, 3000.0))
    results.append(_res("n1", True, 0.5, role="rendezvous"))
    recs = netprobe.result_file("n0", results, 1.0).records
    assert [(r.name, r.status) for r in recs] == [
        ("reach n999 10.0.0.999:29400 (mesh)", "fail"),
        ("reach 199 peers (mesh)", "pass"),
        ("reach 1 peer (rendezvous)", "pass"),
    ]
    assert "firewall-cmd" in recs[0].remedy and "n999" in recs[0].message
    assert recs[1].value == 199.0 and "slowest: n199 (10.0.0.199:29400) 199.0 ms" in recs[1].message
    assert netprobe.result_file("n0", [], 0.0).records == []
