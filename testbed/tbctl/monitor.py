"""The site's monitoring stack on the simulated cluster (`make testbed-up MONITOR=1`, `make demo
MONITOR=1`; docs/monitoring.md, docs/testbed.md).

Real components, as a site runs them beside gpufleet:

* in each node, Debian's ``prometheus-node-exporter`` (its own package, unit and user),
  installed into the node's overlay when the monitor is turned on, listening on the node's
  address, port 9100, with the textfile collector reading Debian's directory
  (:data:`TEXTFILE_DIR`, which the inventory gives gpufleet as
  ``gpufleet_health_textfile_dir``); each node's firewalld opens 9100/tcp;
* on the host, Debian's ``prometheus`` (``make monitor-deps``) on 127.0.0.1:9090 (loopback
  only), scraping every node's exporter over the testbed bridge, with gpufleet's shipped
  rules (monitoring/prometheus/gpufleet.rules.yml) loaded; its pid and data live under
  ``testbed/.state/run/monitor`` and ``testbed-down`` stops it.

Why node_exporter is installed at boot rather than baked into the base root filesystem
(config.ROOTFS_PACKAGES): a change of that list rebuilds the cached base for every testbed
user, and a testbed already running keeps its nodes on the old one; the package is 13 MB,
downloaded once into the cache (``apt-get download``, the host's apt sources) and installed
with ``dpkg -i`` only into the nodes of a testbed that asks for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .config import CACHE_DIR, NODE_TEXTFILE_DIR, REPO_DIR, RUN_DIR, Node
from .nodes import node_exec, write_file
from .sh import TestbedError, cmdline, run, say, wait_for

MONITOR_DIR = RUN_DIR / "monitor"
STATE_FILE = MONITOR_DIR / "enabled"
PID_FILE = MONITOR_DIR / "prometheus.pid"
LOG = MONITOR_DIR / "prometheus.log"
DEB_DIR = CACHE_DIR / "debs"
PACKAGE = "prometheus-node-exporter"
EXPORTER_PORT = 9100
LISTEN = "127.0.0.1:9090"
TEXTFILE_DIR = NODE_TEXTFILE_DIR
RULES = REPO_DIR / "monitoring" / "prometheus" / "gpufleet.rules.yml"
JOB = "gpufleet-nodes"
#: Scrape and rule evaluation every 5 s: a fault shows within two of the timer's 15 s passes.
INTERVAL_S = 5
NODE_DEB_PATH = "/var/cache/gftb/prometheus-node-exporter.deb"


def enabled() -> bool:
    return STATE_FILE.is_file()


def prometheus_config(targets: list[tuple[str, str]], rules: Path, interval_s: int) -> str:
    """prometheus.yml: ``targets`` as (node name, host:port), each sample labelled with its
    node name (``node``), the rules file loaded."""
    config = {
        "global": {"scrape_interval": f"{interval_s}s", "evaluation_interval": f"{interval_s}s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": JOB,
                "static_configs": [
                    {"targets": [address], "labels": {"node": name}} for name, address in targets
                ],
            }
        ],
    }
    return json.dumps(config, indent=2) + "\n"  # JSON is YAML


def exporter_args(address: str) -> str:
    """ARGS of /etc/default/prometheus-node-exporter (the Debian unit passes $ARGS)."""
    return (
        f'ARGS="--web.listen-address={address}:{EXPORTER_PORT} '
        f'--collector.textfile.directory={TEXTFILE_DIR}"\n'
    )


def firewall_argv() -> list[list[str]]:
    """The firewall-cmd calls that let the host scrape a node's exporter."""
    return [
        ["firewall-cmd", "--permanent", f"--add-port={EXPORTER_PORT}/tcp"],
        ["firewall-cmd", "--reload"],
    ]


# --------------------------------------------------------------------------- the nodes


def node_exporter_deb() -> Path:
    """Debian's prometheus-node-exporter package, downloaded once into the cache."""
    DEB_DIR.mkdir(parents=True, exist_ok=True)
    found = sorted(DEB_DIR.glob(f"{PACKAGE}_*.deb"))
    if found:
        return found[-1]
    say(f"monitor: downloading Debian's {PACKAGE} into {DEB_DIR} (apt-get download, once)")
    run(
        ["sh", "-c", f'cd "$1" && apt-get download {PACKAGE}', "apt-get-download", str(DEB_DIR)],
        what=f"apt-get download {PACKAGE}",
        fix="run `make monitor-deps` (it runs apt-get update when prometheus is missing) or "
        "`apt-get update`, then `make testbed-up MONITOR=1` again",
    )
    found = sorted(DEB_DIR.glob(f"{PACKAGE}_*.deb"))
    if not found:
        raise TestbedError(f"apt-get download left no {PACKAGE}_*.deb in {DEB_DIR}")
    return found[-1]


def _exporter_answers(node: Node) -> bool:
    try:
        url = f"http://{node.address}:{EXPORTER_PORT}/metrics"
        with urllib.request.urlopen(url, timeout=2) as r:
            status: int = r.status
            return status == 200
    except OSError:
        return False


def node_up(node: Node, deb: Path) -> None:
    """node_exporter in ``node`` (idempotent): the package, its arguments, the firewall."""
    have = node_exec(
        node, ["dpkg-query", "-W", "-f=${Status}", PACKAGE], check=False
    ).stdout.strip()
    if have != "install ok installed":
        missing = node_exec(node, ["dpkg-query", "-W", "-f=${Status}", "adduser"], check=False)
        if "install ok installed" not in missing.stdout:
            raise TestbedError(
                f"{node.name}: the base rootfs has no adduser, which {PACKAGE} needs; run "
                "`make testbed-clean` then `make testbed-up MONITOR=1`"
            )
        say(f"{node.name}: installing Debian's {PACKAGE} ({deb.name})")
        write_file(node, NODE_DEB_PATH, deb.read_bytes(), 0o644)
        dpkg = ["env", "DEBIAN_FRONTEND=noninteractive", "dpkg", "-i", NODE_DEB_PATH]
        node_exec(node, dpkg, timeout=180)
    args = exporter_args(node.address).encode()
    write_file(node, "/etc/default/prometheus-node-exporter", args, 0o644)
    node_exec(node, ["install", "-d", "-m", "0755", TEXTFILE_DIR])
    for argv in firewall_argv():
        node_exec(node, argv)
    node_exec(node, ["systemctl", "enable", PACKAGE], timeout=60)
    node_exec(node, ["systemctl", "restart", PACKAGE], timeout=60)
    if not wait_for(lambda: _exporter_answers(node), 30, 0.5):
        status = node_exec(node, ["systemctl", "status", "--no-pager", PACKAGE], check=False)
        raise TestbedError(
            f"{node.name}: node_exporter does not answer on {node.address}:{EXPORTER_PORT} "
            f"within 30 s:\n{status.stdout[-2000:]}\n--- what to do: `testbed/node "
            f"{node.name} -- journalctl -u {PACKAGE}`"
        )


# --------------------------------------------------------------------------- the host


def prometheus_pid(pid_file: Path = PID_FILE) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    cmd = cmdline(pid)
    return pid if cmd is not None and "prometheus" in cmd and "--config.file" in cmd else None


def api(listen: str, path: str, params: dict[str, str] | None = None) -> Any:
    """GET http://<listen>/api/v1/<path>: the ``data`` of Prometheus' answer."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"http://{listen}/api/v1/{path}{query}", timeout=5) as r:
        body = json.loads(r.read().decode())
    if body.get("status") != "success":
        raise TestbedError(f"Prometheus {path}: {body}")
    return body["data"]


def _ready(listen: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{listen}/-/ready", timeout=2) as r:
            status: int = r.status
            return status == 200
    except OSError:
        return False


def start_prometheus(
    config_text: str, workdir: Path, listen: str = LISTEN, pid_file: Path = PID_FILE
) -> int:
    """Debian's prometheus with ``config_text`` (data and log under ``workdir``), bound to
    ``listen``; a running one is given the new configuration (SIGHUP). Its pid."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise TestbedError("no prometheus on this host: run `make monitor-deps` (Debian's package)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(config_text)
    pid = prometheus_pid(pid_file)
    if pid is not None:
        os.kill(pid, signal.SIGHUP)  # reload: the node list or the rules changed
        return pid
    argv = [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={listen}"]  # fmt: skip
    with (workdir / "prometheus.log").open("a") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=workdir,
        )  # fmt: skip
    pid_file.write_text(f"{proc.pid}\n")
    if not wait_for(lambda: _ready(listen), 60, 0.5):
        tail = (workdir / "prometheus.log").read_text(errors="replace")[-2000:]
        stop_prometheus(pid_file)
        raise TestbedError(
            f"prometheus did not become ready on {listen} within 60 s:\n{tail}\n--- what to "
            f"do: is {listen} taken (`ss -ltnp`)? read {workdir / 'prometheus.log'}"
        )
    return proc.pid


def gone(pid: int) -> bool:
    """The process has ended (a zombie of ours is reaped; one of another parent counts as
    ended: init reaps it)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def stop_prometheus(pid_file: Path = PID_FILE) -> None:
    pid = prometheus_pid(pid_file)
    if pid is not None:
        say(f"monitor: stopping Prometheus (pid {pid})")
        os.kill(pid, signal.SIGTERM)
        if not wait_for(lambda: gone(pid), 15):
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: gone(pid), 5)
    pid_file.unlink(missing_ok=True)


# --------------------------------------------------------------------------- tbctl


def up(nodes: list[Node]) -> None:
    """node_exporter in every node, Prometheus on the host (idempotent)."""
    t0 = time.monotonic()
    deb = node_exporter_deb()
    for n in nodes:
        node_up(n, deb)
    MONITOR_DIR.mkdir(parents=True, exist_ok=True)
    rules = MONITOR_DIR / RULES.name
    shutil.copyfile(RULES, rules)
    text = prometheus_config(
        [(n.name, f"{n.address}:{EXPORTER_PORT}") for n in nodes], rules, INTERVAL_S
    )
    pid = start_prometheus(text, MONITOR_DIR)
    STATE_FILE.write_text(",".join(n.name for n in nodes) + "\n")
    say(
        f"monitor: node_exporter on {len(nodes)} node(s), Prometheus http://{LISTEN} "
        f"(pid {pid}, rules {RULES.relative_to(REPO_DIR)}): up in {time.monotonic() - t0:.0f}s"
    )


def down() -> None:
    stop_prometheus()
    STATE_FILE.unlink(missing_ok=True)


def gpufleet_nodes(listen: str = LISTEN) -> dict[str, float]:
    """node -> its gpufleet_health_last_run_timestamp_seconds, as Prometheus has it now."""
    data = api(listen, "query", {"query": "gpufleet_health_last_run_timestamp_seconds"})
    return {r["metric"].get("node", "?"): float(r["value"][1]) for r in data["result"]}


def wait_for_nodes(names: list[str], timeout: float, listen: str = LISTEN) -> dict[str, float]:
    """Wait until Prometheus has gpufleet's metrics of every node in ``names``."""
    seen: dict[str, float] = {}

    def all_seen() -> bool:
        nonlocal seen
        try:
            seen = gpufleet_nodes(listen)
        except (OSError, urllib.error.URLError, TestbedError):
            return False
        return set(names) <= set(seen)

    if not wait_for(all_seen, timeout, 2.0):
        missing = sorted(set(names) - set(seen))
        raise TestbedError(
            f"Prometheus at http://{listen} has no gpufleet_health_ metrics of {missing} after "
            f"{timeout:.0f} s. What to do: `testbed/node {missing[0]} -- systemctl status "
            "gpufleet-health.timer` (provisioned with gpufleet_health_timer?) and `ls "
            f"{TEXTFILE_DIR}` in the node; http://{listen}/targets shows the scrapes"
        )
    return seen
