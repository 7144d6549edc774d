"""A real Prometheus reads gpufleet's metrics on this machine: Debian's prometheus (make
monitor-deps), started by the testbed's own code (tbctl.monitor.start_prometheus) on a free
loopback port with the shipped rules, scrapes what `gpufleet health --textfile` wrote, served
the way node_exporter's textfile collector serves it (the file's samples beside
node_exporter_build_info). A healthy pass, then a failing one: the query API shows the check's
status turn to 4 (fail) and /api/v1/alerts the GpufleetNodeUnhealthy alert firing for it.
The same chain with the real node_exporter in every node and the systemd timer is
tests/integration/test_demo.py (make e2e, testbed)."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from checks_helpers import MANIFEST, RECORDINGS
from gpufleet.commands import cmd_health

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import monitor  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="Debian's prometheus is not installed: run `make monitor-deps`",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(host:port, textfile): /metrics serves the textfile as node_exporter would."""
    prom = tmp_path / "textfile" / "gpufleet.prom"

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            text = 'node_exporter_build_info{version="1.5.0"} 1\n'
            text += prom.read_text() if prom.exists() else ""
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", prom
    finally:
        server.shutdown()
        server.server_close()


def until(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    end = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < end:
        try:
            last = check()
        except OSError as exc:
            last = exc
        if last and not isinstance(last, OSError):
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")


def health_pass(tmp: Path, prom: Path, nccl_env: str) -> int:
    manifest = json.loads(MANIFEST.read_text())
    env_file = tmp / "nccl.env"
    env_file.write_text(nccl_env)
    py = tmp / "env" / "bin" / "python"
    py.parent.mkdir(parents=True, exist_ok=True)
    py.write_text("#!/bin/sh\n")
    py.chmod(0o755)
    manifest.update(env_python=str(py), env_file=str(env_file))
    (tmp / "manifest.json").write_text(json.dumps(manifest))
    args = cmd_health.build_args(
        ["--manifest", str(tmp / "manifest.json"), "--state", str(tmp / "state.json"),
         "--nvml-recording", str(RECORDINGS / "healthy-h100x8.json"), "--textfile", str(prom)]
    )  # fmt: skip
    return cmd_health.run(args)


def test_prometheus_scrapes_the_status_and_fires_the_alert_on_a_failing_pass(
    tmp_path: Path, exporter: tuple[str, Path]
) -> None:
    target, prom = exporter
    assert health_pass(tmp_path, prom, "GLOO_SOCKET_IFNAME=lo\n") == 0
    work = tmp_path / "prometheus"
    listen = f"127.0.0.1:{free_port()}"
    pid_file = tmp_path / "prometheus.pid"
    rules = tmp_path / monitor.RULES.name
    shutil.copyfile(monitor.RULES, rules)
    config = monitor.prometheus_config([("gpu7", target)], rules, interval_s=1)
    pid = monitor.start_prometheus(config, work, listen, pid_file)
    try:
        query = {"query": 'gpufleet_health_check_status{check="nccl_env_interfaces"}'}

        def status() -> float | None:
            result = monitor.api(listen, "query", query)["result"]
            return float(result[0]["value"][1]) if result else None

        assert until("the healthy pass scraped", lambda: status() == 0)
        rule_names = {r["name"] for g in monitor.api(listen, "rules")["groups"] for r in g["rules"]}
        assert "GpufleetNodeUnhealthy" in rule_names and "GpufleetHealthExpired" in rule_names

        assert health_pass(tmp_path, prom, "GLOO_SOCKET_IFNAME=bogus0\n") == 1
        assert until("the failing pass scraped", lambda: status() == 4)
        nodes = monitor.gpufleet_nodes(listen)
        assert set(nodes) == {"gpu7"}  # the node label of the scrape config

        def firing() -> list[dict[str, Any]]:
            return [
                a for a in monitor.api(listen, "alerts")["alerts"]
                if a["labels"]["alertname"] == "GpufleetNodeUnhealthy" and a["state"] == "firing"
            ]  # fmt: skip

        alerts = until("GpufleetNodeUnhealthy firing", firing)
        assert [a["labels"]["check"] for a in alerts] == ["nccl_env_interfaces"]
        assert alerts[0]["labels"]["node"] == "gpu7"
        assert alerts[0]["annotations"]["summary"].endswith(
            "gpufleet check nccl_env_interfaces fails"
        )
    finally:
        monitor.stop_prometheus(pid_file)
    assert monitor.gone(pid) and not pid_file.exists()
