"""TCP pre-check (gpufleet.netprobe): reachable, refused, cause strings, result file."""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from gpufleet import netprobe
from gpufleet.errors import RefusedError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = _free_port()
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
    port = _free_port()
    out = tmp_path / "probe.json"
    t0 = time.monotonic()
    rc = netprobe.main(
        [
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
        with pytest.raises(RefusedError, match="cannot listen"):
            netprobe.serve("n", "127.0.0.1", [port], duration=1)


def test_serve_is_bounded_by_its_duration() -> None:
    t0 = time.monotonic()
    assert netprobe.serve("n", "127.0.0.1", [_free_port()], duration=0.5, expect=5) == 0
    assert time.monotonic() - t0 < 3
