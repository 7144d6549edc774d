"""Shared helpers for the fault scenarios (tests/integration/test_faults.py) and the cluster benchmark
(tests/bench/bench_cluster.py) on the simulated cluster: run make / ansible-playbook with timing,
read PLAY RECAP, and inject faults inside a node's own namespaces (firewall rules, link
state, processes) without going through the network being broken.

Faults use a table of their own (``inet gftb_fault``) in the node's network namespace, so
firewalld's tables are never edited and ``clear_faults`` undoes everything at once.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "testbed") not in sys.path:
    sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config, nodes  # noqa: E402
from tbctl.cli import REQUIRED_TOOLS  # noqa: E402

VENV_BIN = Path(sys.executable).parent
INVENTORY = config.INVENTORY_DIR
FAULT_TABLE = "gftb_fault"
ENV_PYTHON = "/opt/gpufleet/env/bin/python"
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)
# what a verify run leaves running on a node if something went wrong
LEFTOVER = re.compile(r"torch\.distributed\.run|gpufleet\.workers|gpufleet\.netprobe")


def cluster_marks(
    timeout: int, tools: Sequence[str] = REQUIRED_TOOLS
) -> list[pytest.MarkDecorator]:
    """The marks of a test module on the simulated cluster: testbed and slow, a pytest timeout
    (seconds), and a skip without root or without one of ``tools`` on the host."""
    missing = [t for t in tools if shutil.which(t) is None]
    return [
        pytest.mark.testbed,
        pytest.mark.slow,
        pytest.mark.timeout(timeout),
        pytest.mark.skipif(os.geteuid() != 0, reason="the testbed needs root (namespaces, mounts)"),
        pytest.mark.skipif(
            bool(missing), reason=f"testbed tools missing: {missing}; run `make testbed-deps`"
        ),
    ]


@dataclass
class Run:
    """One finished command: exit status, combined output, wall seconds."""

    argv: list[str]
    rc: int
    out: str
    seconds: float
    marks: dict[str, float] = field(default_factory=dict)

    def recap(self) -> dict[str, tuple[int, int, int, int]]:
        """Last PLAY RECAP: host -> (ok, changed, unreachable, failed)."""
        last = self.out.rsplit("PLAY RECAP", 1)[-1]
        return {m[0]: (int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in RECAP.findall(last)}

    def tail(self, n: int = 6000) -> str:
        return self.out[-n:]


def _env() -> dict[str, str]:
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (ansible-playbook's workers call setsid, so the
    process group alone misses them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _killpg(pgid: int) -> None:
    """SIGKILL the process group and every descendant: what a crash of the controller
    does (SIGSTOP first, so nothing forks or reaps in between)."""
    tree = [pgid, *_descendants(pgid)]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    log: Path | None = None,
    on_line: Callable[[str, float], float | None] | None = None,
) -> Run:
    """Run ``argv`` in its own process group from the repository root, streaming its output
    to ``log``. ``on_line(line, elapsed)`` may return a delay in seconds after which the
    whole group is killed with SIGKILL (the controller-crash fault); the kill time is kept
    in ``marks["killed"]``. Past ``timeout`` the group is killed too and rc is 124."""
    import selectors

    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        bufsize=0,
        start_new_session=True,
    )
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = b""
    lines: list[str] = []
    marks: dict[str, float] = {}
    timed_out = False
    kill_at: float | None = None
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("w") if log else None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            now = time.monotonic()
            if now - start > timeout:
                _killpg(proc.pid)
                timed_out = True
                break
            if kill_at is not None and now >= kill_at:
                _killpg(proc.pid)
                marks["killed"] = now - start
                break
            if not sel.select(timeout=0.2):
                if proc.poll() is not None:
                    break
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            pending += chunk
            *done, pending = pending.split(b"\n")
            for raw in done:
                line = raw.decode(errors="replace") + "\n"
                lines.append(line)
                if fh:
                    fh.write(line)
                    fh.flush()
                if on_line and kill_at is None:
                    delay = on_line(line, time.monotonic() - start)
                    if delay is not None:
                        kill_at = time.monotonic() + delay
        rc = proc.wait(timeout=60)
    finally:
        sel.close()
        if fh:
            fh.close()
        if proc.poll() is None:
            _killpg(proc.pid)
            proc.wait()
    if pending:
        lines.append(pending.decode(errors="replace"))
    took = time.monotonic() - start
    return Run(list(argv), 124 if timed_out else rc, "".join(lines), took, marks)


def make(*args: str, timeout: float = 1800, log: Path | None = None) -> Run:
    return run(["make", "--no-print-directory", *args], timeout=timeout, log=log)


def playbook(
    name: str,
    *extra: str,
    timeout: float = 1800,
    log: Path | None = None,
    on_line: Callable[[str, float], float | None] | None = None,
) -> Run:
    """ansible-playbook playbooks/<name> -i testbed/inventory (the wheel must be built)."""
    argv = [str(VENV_BIN / "ansible-playbook"), f"playbooks/{name}", "-i", str(INVENTORY)]
    return run([*argv, *extra], timeout=timeout, log=log, on_line=on_line)


def verify(run_id: str, *extra: str, timeout: float = 1200, log: Path | None = None) -> Run:
    """make verify on the testbed with a fixed run id (reports/<run_id>/)."""
    args = " ".join(extra)
    return make(
        "verify",
        f"INVENTORY={INVENTORY}",
        f"RUN_ID={run_id}",
        f"VERIFY_ARGS={args}",
        timeout=timeout,
        log=log,
    )


def summary(run_id: str) -> dict[str, Any]:
    path = REPO / "reports" / run_id / "summary.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    return data


# --------------------------------------------------------------------------- nodes


def cluster_nodes() -> list[config.Node]:
    names = nodes.node_names_from_state()
    return config.make_nodes(len(names)) if names else []


def by_name(name: str) -> config.Node:
    for n in cluster_nodes():
        if n.name == name:
            return n
    raise LookupError(f"{name} is not a node of the running testbed")


def reboots(node: config.Node) -> list[tuple[float, float]]:
    """(went down, booted again) of each reboot of the node, from its boots.log on the host."""
    rows = nodes.boots(node)
    out = []
    for (kind, when, what), nxt in itertools.pairwise(rows):
        if kind == "down" and what == "rc=129" and nxt[0] == "boot":
            out.append((when, nxt[1]))
    return out


def node_sh(
    node: config.Node, script: str, *, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A shell command inside the node (nsenter into its namespaces: works with the link down)."""
    pid = nodes.init_pid(node)
    if pid is None:
        raise RuntimeError(f"{node.name} is not running")
    return subprocess.run(
        [*nodes.nsenter(node, pid), "/bin/bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def node_out(node: config.Node, script: str) -> str:
    """:func:`node_sh` that must succeed: its stripped stdout (the assertion names the node,
    the command and what it printed)."""
    r = node_sh(node, script)
    assert r.returncode == 0, f"{node.name}: {script}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def tbctl(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """``python -m tbctl ARGS`` (testbed up/down/status) from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "tbctl", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO / "testbed")),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ssh_argv(node: config.Node | str) -> list[str]:
    """ssh to a node (or an address) with the testbed's key and known_hosts (no agent, no
    passwords, strict host keys)."""
    address = node if isinstance(node, str) else node.address
    return [
        "ssh",
        "-i",
        str(nodes.CLIENT_KEY),
        "-o",
        f"UserKnownHostsFile={nodes.KNOWN_HOSTS}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        f"root@{address}",
    ]


def ssh(
    node: config.Node, command: str, *, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ssh_argv(node), command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _nft(node: config.Node, script: str) -> None:
    subprocess.run(
        ["ip", "netns", "exec", node.netns, "nft", "-f", "-"],
        input=script,
        text=True,
        capture_output=True,
        check=True,
    )


def block_input(node: config.Node, rule: str) -> None:
    """Add an nft rule to the fault table's input chain of the node, e.g.
    ``iifname "eth0" tcp dport 29500 drop``."""
    _nft(
        node,
        f"table inet {FAULT_TABLE} {{\n"
        "  chain input { type filter hook input priority -10; policy accept; }\n"
        "  chain output { type filter hook output priority -10; policy accept; }\n"
        "}\n"
        f"add rule inet {FAULT_TABLE} input {rule}\n",
    )


def block_output(node: config.Node, rule: str) -> None:
    """Add an nft rule to the fault table's output chain of the node."""
    block_input(node, "meta nfproto ipv4 counter")  # creates the table and chains
    _nft(node, f"add rule inet {FAULT_TABLE} output {rule}\n")


def clear_faults(node: config.Node) -> None:
    """Remove the fault table and any link shaping, bring the link up (safe when nothing
    was injected)."""
    subprocess.run(
        ["ip", "netns", "exec", node.netns, "nft", "delete", "table", "inet", FAULT_TABLE],
        capture_output=True,
        check=False,
    )
    throttle(node, None)
    link(node, up=True)


def throttle(node: config.Node, kbit: int | None) -> None:
    """Shape what the node sends on its cluster link to ``kbit`` kbit/s (a token bucket,
    tc-tbf(8)); None removes the shaping."""
    base = ["ip", "netns", "exec", node.netns, "tc", "qdisc"]
    if kbit is None:
        subprocess.run([*base, "del", "dev", "eth0", "root"], capture_output=True, check=False)
        return
    subprocess.run(
        [*base, "replace", "dev", "eth0", "root", "tbf", "rate", f"{kbit}kbit",
         "burst", "256kb", "latency", "200ms"],
        capture_output=True,
        check=True,
    )  # fmt: skip


def _netns_pids(
    node: config.Node, pattern: re.Pattern[str], also_children_of: Sequence[int] = ()
) -> list[int]:
    """Host PIDs of the node's processes (its network namespace) whose command line matches,
    and those whose parent is one of ``also_children_of``."""
    want = f"net:[{os.stat(f'/run/netns/{node.netns}').st_ino}]"
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.readlink(proc / "ns" / "net") != want:
                continue
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern.search(args):
            out.append(int(proc.name))
        elif also_children_of:
            with contextlib.suppress(OSError, ValueError, IndexError):
                if _ppid(int(proc.name)) in also_children_of:
                    out.append(int(proc.name))
    return out


#: the Python of verify's compute and burn-in steps on a node (roles/verify/tasks/compute.yml),
#: not the sh and timeout around it: argv[0] is the environment's python
COMPUTE_PYTHON = re.compile(r"^\S*python[0-9.]* -m gpufleet compute\b")


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, ppid, ... (field 3 onwards)."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _start_ticks(pid: int) -> int:
    return int(_stat_fields(pid)[19])


def _age_s(pid: int) -> float:
    """Seconds since the process started (its start time against the uptime)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return uptime - _start_ticks(pid) / os.sysconf("SC_CLK_TCK")


def _ppid(pid: int) -> int:
    return int(_stat_fields(pid)[1])


@dataclass
class Slowed:
    """What slowed_compute did: the PIDs it held (the compute process and what it started),
    how old each was when first held (a late hold leaves the start of the work at full
    speed), and how many stop/continue cycles it ran and for how long it kept them stopped."""

    started: dict[int, int] = field(default_factory=dict)  # held PID -> its start (ticks)
    moved_at_age_s: list[float] = field(default_factory=list)
    cycles: int = 0
    stopped_s: float = 0.0

    @property
    def moved(self) -> list[int]:
        """The PIDs held, in the order they were first seen."""
        return list(self.started)

    def live(self) -> list[int]:
        """The held PIDs that still name the same process (a PID the kernel gave to another
        process since is never signalled)."""
        out = []
        for pid, ticks in self.started.items():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if _start_ticks(pid) == ticks and _stat_fields(pid)[0] != "Z":
                    out.append(pid)
        return out


@contextlib.contextmanager
def slowed_compute(
    node: config.Node, share: float = 0.05, period_s: float = 0.3, poll_s: float = 0.05
) -> Iterator[Slowed]:
    """While inside: ``node``'s ``gpufleet compute`` process, and every process it starts (a
    device's process, spawned), runs ``share`` of the time: a thread stops them (SIGSTOP)
    and lets them go on (SIGCONT) ``period_s`` apart, as a GPU throttled to a fraction of
    its siblings computes. The same on any host, whatever its cgroup layout (a CPU quota
    in a cgroup of the host's did not bite on the CI machine). The thread sees a new such
    process within ``poll_s`` of its start (torch's import takes seconds before the sweep),
    and nothing else on the node is slowed: the links, the smoke suite and the training
    keep their speed, and only the compute figure can name the node. On the way out every
    held process is let go on. Yields a Slowed that the caller reads after the block."""
    done = Slowed()
    stop = threading.Event()
    run_s = period_s * share

    def hold_new() -> None:
        for pid in _netns_pids(node, COMPUTE_PYTHON, also_children_of=done.moved):
            if pid not in done.started:
                with contextlib.suppress(OSError, ValueError, IndexError):  # it may have ended
                    ticks, age = _start_ticks(pid), round(_age_s(pid), 3)
                    done.started[pid] = ticks
                    done.moved_at_age_s.append(age)

    def signal_all(sig: signal.Signals) -> int:
        n = 0
        for pid in done.live():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
                n += 1
        return n

    def watch() -> None:
        while not stop.is_set():
            if not signal_all(signal.SIGSTOP):
                hold_new()
                stop.wait(poll_s)
                continue
            t0 = time.monotonic()
            hold_new()  # while they are stopped: a child started since is held from now on
            signal_all(signal.SIGSTOP)
            stop.wait(max(0.0, period_s - run_s - (time.monotonic() - t0)))
            done.stopped_s += time.monotonic() - t0
            signal_all(signal.SIGCONT)
            done.cycles += 1
            stop.wait(run_s)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield done
    finally:
        stop.set()
        t.join(timeout=5)
        signal_all(signal.SIGCONT)
        done.stopped_s = round(done.stopped_s, 1)


def link(node: config.Node, *, up: bool) -> None:
    subprocess.run(
        ["ip", "-n", node.netns, "link", "set", "eth0", "up" if up else "down"],
        capture_output=True,
        check=True,
    )


def processes(node: config.Node) -> list[tuple[int, str]]:
    """(pid, command line) of every process of the node (its own PID namespace)."""
    r = node_sh(node, "ps -eo pid=,args=")
    out = []
    for line in r.stdout.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit():
            out.append((int(pid), args.strip()))
    return out


def leftovers(node: config.Node) -> list[tuple[int, str]]:
    """Processes a verify run started and that still run (torchrun, workers, probes)."""
    return [(p, a) for p, a in processes(node) if LEFTOVER.search(a) and "ps -eo" not in a]


def wait_no_leftovers(
    node_list: Sequence[config.Node], limit: float
) -> tuple[float, dict[str, list[tuple[int, str]]]]:
    """Poll until no node runs a verify process or ``limit`` seconds pass.
    Returns (seconds waited, {node: leftovers})."""
    start = time.monotonic()
    while True:
        left = {n.name: leftovers(n) for n in node_list}
        left = {k: v for k, v in left.items() if v}
        if not left or time.monotonic() - start > limit:
            return time.monotonic() - start, left
        time.sleep(1)


def node_file(node: config.Node, path: str) -> Path:
    """A file written inside the node, read from the host through the overlay's upper dir
    (a file the node wrote lives there)."""
    return node.run_dir / "upper" / path.lstrip("/")


def wait_for(cond: Callable[[], bool], limit: float, what: str, interval: float = 0.5) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > limit:
            raise TimeoutError(f"{what}: not seen within {limit:.0f} s")
        time.sleep(interval)
    return time.monotonic() - start


def wait_sweeping(node: config.Node, run_id: str, limit: float = 240) -> float:
    """Wait until the node's all-reduce log of verify run ``run_id`` shows the sweep
    running (the worker's "sweeping" progress line): the moment to inject a fault."""
    log = node_file(node, f"/var/lib/gpufleet/runs/{run_id}/{node.name}/allreduce.log")

    def sweeping() -> bool:
        try:
            return "sweeping" in log.read_text(errors="replace")
        except OSError:
            return False

    return wait_for(sweeping, limit, f"{node.name}: the all-reduce sweep")
