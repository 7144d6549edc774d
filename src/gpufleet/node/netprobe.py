"""TCP reachability matrix for the verify pre-check, bounded by timeouts.

Two halves, run on every node by playbooks/verify.yml before anything is launched:

``serve``   listen on the probe port (and, on the master, on the rendezvous port, which
            torchrun has not taken yet) until ``--duration`` seconds pass or ``--expect``
            connections were accepted; answers each connection with its node name.
``connect`` connect to each ``NAME=HOST:PORT`` target with ``--timeout`` seconds per try
            and ``--retries`` tries (listeners of the other nodes may start a moment later);
            prints one line per blocked pair ``from -> to (host:port): cause`` and writes a
            JSON list of results. Exit 0 all reachable, 1 any blocked.

The cause is read from the socket error: a refused connection means the packet arrived and
nothing listened (or a REJECT rule), "no route to host" is typically firewalld's
icmp-host-prohibited REJECT, a timeout means packets were dropped (firewall DROP or the
address belongs to another interface/network), "network unreachable" means no route from
this node's interfaces (wrong interface or CIDR).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import RefusedError
from gpufleet.results import Record, ResultFile, utc_stamp


@dataclass(frozen=True)
class Target:
    name: str
    host: str
    port: int
    role: str = "probe"  # "rendezvous" or "probe"


@dataclass(frozen=True)
class ProbeResult:
    source: str
    target: str
    host: str
    port: int
    role: str
    ok: bool
    seconds: float
    error: str = ""
    cause: str = ""
    peer: str = ""  # name the listener answered with

    def line(self) -> str:
        what = f"{self.source} -> {self.target} ({self.host}:{self.port}, {self.role})"
        if self.ok:
            return f"ok      {what} {self.seconds * 1000:.1f} ms"
        return f"BLOCKED {what}: {self.error}; likely cause: {self.cause}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind to port 0, read it back)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def parse_target(text: str) -> Target:
    """``name=host:port[:role]``"""
    try:
        name, rest = text.split("=", 1)
        parts = rest.rsplit(":", 2)
        if len(parts) == 3 and not parts[2].isdigit():
            host, port, role = parts
        else:
            host, port = rest.rsplit(":", 1)
            role = "probe"
        return Target(name, host.strip("[]"), int(port), role)
    except ValueError:
        raise RefusedError(
            f"cannot read probe target {text!r}; write NAME=HOST:PORT[:ROLE]"
        ) from None


def cause_of(err: BaseException) -> str:
    if isinstance(err, TimeoutError | socket.timeout):
        return (
            "packets dropped: a firewall DROP rule (firewalld zone without the port "
            "open to the cluster CIDR) or the address is on another interface/network "
            "than the one the nodes share"
        )
    code = getattr(err, "errno", None)
    if code == errno.ECONNREFUSED:
        return (
            "nothing listens there (port closed, another address bound, or a "
            "firewall REJECT with tcp-reset)"
        )
    if code == errno.EHOSTUNREACH:
        return (
            "firewalld REJECT (icmp-host-prohibited) on the target, or the host is "
            "down: open the port with firewall-cmd --add-port or the cluster_network role"
        )
    if code == errno.ENETUNREACH:
        return (
            "no route from this node: wrong interface or gpufleet_cluster_address "
            "outside gpufleet_cluster_cidr"
        )
    if isinstance(err, socket.gaierror):
        return "the name does not resolve: use addresses or fix /etc/hosts"
    return "see the error"


def connect_once(t: Target, timeout: float) -> tuple[bool, str, str, float]:
    t0 = time.monotonic()
    try:
        with socket.create_connection((t.host, t.port), timeout=timeout) as s:
            s.settimeout(timeout)
            try:
                peer = s.recv(256).decode("utf-8", "replace").strip()
            except OSError:
                peer = ""
            return True, "", peer, time.monotonic() - t0
    except OSError as exc:
        return False, f"{type(exc).__name__}: {exc}", cause_of(exc), time.monotonic() - t0


def probe(
    source: str,
    targets: Sequence[Target],
    timeout: float = 3.0,
    retries: int = 3,
    delay: float = 1.0,
    up_until: float | Callable[[], float] = 0.0,
) -> list[ProbeResult]:
    """Connect to each target, ``retries`` tries ``delay`` apart. Until the monotonic time
    ``up_until`` a refused connection is not a try: the peer's listener may not be up yet
    (``gpufleet probe mesh`` starts every node at once, without a barrier). A callable is
    asked again at each refusal: the time can move as the run learns when its peers started."""

    def until() -> float:
        return up_until() if callable(up_until) else float(up_until)

    results = []
    for t in targets:
        ok, err, extra, secs = False, "", "", 0.0
        for attempt in range(max(1, retries)):
            ok, err, extra, secs = connect_once(t, timeout)
            while (
                not ok and err.startswith("ConnectionRefusedError") and time.monotonic() < until()
            ):
                time.sleep(0.2)
                ok, err, extra, secs = connect_once(t, timeout)
            if ok and extra != t.name:
                # something accepted, but not the target's pre-check listener: another
                # process holds the port (a squatter on the rendezvous port, an old run)
                ok, err = False, f"connected, but the listener answered {extra!r}, not {t.name!r}"
                extra = (
                    f"another process holds port {t.port} on {t.name}, not gpufleet's "
                    "pre-check listener (see that node's listen record)"
                )
            if ok:
                break
            if attempt + 1 < retries:
                time.sleep(delay)
        results.append(
            ProbeResult(
                source=source,
                target=t.name,
                host=t.host,
                port=t.port,
                role=t.role,
                ok=ok,
                seconds=round(secs, 4),
                error=err if not ok else "",
                cause=extra if not ok else "",
                peer=extra if ok else "",
            )
        )
    return results


def _listen_inodes(port: int, proc: Path) -> set[str]:
    """Socket inodes of TCP listeners on ``port`` (any address) from /proc/net/tcp{,6}."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            # local_address is ADDR:PORT in hex; state 0A is LISTEN
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(cols[9])
    return inodes


def port_holder(port: int, proc: Path = Path("/proc")) -> str:
    """``PID <pid> (<command line>)`` of the process listening on TCP ``port``, or "" when
    none is found (another user's process without privileges to read it, or a network
    namespace this one cannot see)."""
    inodes = _listen_inodes(port, proc)
    if not inodes:
        return ""
    wanted = {f"socket:[{i}]" for i in inodes}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = os.listdir(pid_dir / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(pid_dir / "fd" / fd) in wanted:
                    raw = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").strip()
                    cmd = raw.decode("utf-8", "replace")[:160] or "?"
                    return f"PID {pid_dir.name} ({cmd})"
            except OSError:
                continue
    return ""


class PortInUse(RefusedError):
    """A port the pre-check must listen on is held by another process."""

    def __init__(self, node: str, bind: str, port: int, holder: str, role: str) -> None:
        who = f"in use by {holder}" if holder else "in use by another process"
        super().__init__(
            f"{node}: {role} port {bind}:{port} is already {who} -> stop that process or "
            f"set another {'gpufleet_rdzv_port' if role == 'rendezvous' else 'verify_probe_port'}"
        )
        self.node, self.bind, self.port, self.holder, self.role = node, bind, port, holder, role


def net_result_file(
    kind: str, node: str, records: list[Record], duration_s: float = 0.0
) -> ResultFile:
    """A result file of the network pre-check (mode net) of ``node``, started now."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return ResultFile(
        kind=kind,
        node=node,
        mode="net",
        started=utc_stamp(now),
        duration_s=duration_s,
        records=records,
    )


def listen_failure_file(node: str, busy: PortInUse | Sequence[PortInUse]) -> ResultFile:
    """The probe-listen result of a node whose listener could not take every port."""
    excs = [busy] if isinstance(busy, PortInUse) else list(busy)
    return net_result_file(
        "probe-listen",
        node,
        [
            Record(
                name=f"listen {exc.bind}:{exc.port} ({exc.role})",
                status="fail",
                node=node,
                value=exc.holder or "in use",
                message=str(exc),
                remedy=f"on {node}: ss -ltnp 'sport = :{exc.port}' shows the holder; stop it "
                "or choose another port",
            )
            for exc in excs
        ],
    )


def serve(
    name: str,
    bind: str,
    ports: Sequence[int],
    duration: float,
    expect: int = 0,
    roles: Mapping[int, str] | None = None,
    on_busy: Callable[[PortInUse], None] | None = None,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> int:
    """Accept connections until ``duration`` or ``expect`` accepted (or ``stop`` is set);
    return the count. ``ready`` is set once the ports are bound (``gpufleet probe mesh``
    connects to the peers only then).

    A port another process holds raises PortInUse; with ``on_busy`` it is reported there
    and the other ports are served all the same, so that the peers' probes of them pass and
    the report names the one busy port, not every port of this node. PortInUse is still
    raised when no port could be bound."""
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind, port))
            except OSError as exc:
                s.close()
                role = (roles or {}).get(port, "probe")
                if exc.errno == errno.EADDRINUSE:
                    busy = PortInUse(name, bind, port, port_holder(port), role)
                    if on_busy is None or (not socks and port == ports[-1]):
                        raise busy from exc
                    on_busy(busy)
                    continue
                raise RefusedError(
                    f"{name}: cannot listen on {bind}:{port} ({exc}): is {bind} an address "
                    "of this node? (gpufleet_cluster_address, ip -br addr)"
                ) from exc
            s.listen(64)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            socks.append(s)
        if ready is not None:
            ready.set()
        accepted = 0
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline and not (expect and accepted >= expect):
            if stop is not None and stop.is_set():
                break
            for key, _ in sel.select(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
                lsock = key.fileobj
                assert isinstance(lsock, socket.socket)
                try:
                    conn, _addr = lsock.accept()
                except BlockingIOError:
                    continue
                with conn, contextlib.suppress(OSError):
                    conn.sendall(f"{name}\n".encode())
                accepted += 1
        return accepted
    finally:
        for s in socks:
            s.close()
        sel.close()


def _blocked_record(node: str, r: ProbeResult) -> Record:
    return Record(
        name=f"reach {r.target} {r.host}:{r.port} ({r.role})",
        status="fail",
        node=node,
        value=round(r.seconds * 1000, 2),
        message=r.line(),
        remedy=(
            f"{r.cause}. On {r.target}: firewall-cmd --list-all; ss -ltn | grep {r.port}; "
            f"ip -br addr (is {r.host} on the cluster network?)"
        ),
    )


def _reached_record(node: str, role: str, reached: Sequence[ProbeResult]) -> Record:
    """One record for every peer of ``role`` that answered: a full mesh of N nodes has N - 1
    peers per node, and a record each would make the report grow as N squared (1000 nodes:
    a million records). The log keeps one line per peer; the slowest is named."""
    slow = max(reached, key=lambda r: r.seconds)
    n = len(reached)
    return Record(
        name=f"reach {n} peer{'s' if n != 1 else ''} ({role})",
        status="pass",
        node=node,
        value=round(slow.seconds * 1000, 2),
        message=(
            f"ok      {node} -> {n} peer{'s' if n != 1 else ''} ({role}); slowest: "
            f"{slow.target} ({slow.host}:{slow.port}) {slow.seconds * 1000:.1f} ms"
        ),
    )


def result_file(node: str, results: Sequence[ProbeResult], duration: float) -> ResultFile:
    """The probe result of ``node``: a failing record per peer that did not answer (named,
    with its likely cause and what to run on it), and one passing record per role for the
    peers that did."""
    recs = [_blocked_record(node, r) for r in results if not r.ok]
    roles = dict.fromkeys(r.role for r in results if r.ok)
    recs += [_reached_record(node, role, [r for r in results if r.ok and r.role == role])
             for role in roles]  # fmt: skip
    return net_result_file("probe", node, recs, duration)


IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def ifname_problems(env: Mapping[str, str], interfaces: Iterable[str]) -> list[str]:
    """What is wrong with the interface names NCCL and gloo are told to use.

    NCCL_SOCKET_IFNAME: ``=eth0`` means exactly eth0, ``eth`` every interface starting
    with eth, ``^docker`` excludes, a comma list allows several (NCCL environment variables
    documentation); GLOO_SOCKET_IFNAME: comma list of exact names. A rule that selects no
    interface of this node makes the rendezvous fail later with "Unable to find address".
    """
    have = sorted(set(interfaces))
    out = []
    for var in IFNAME_VARS:
        value = env.get(var, "")
        if not value or value.startswith("^"):
            continue
        exact = var == "GLOO_SOCKET_IFNAME" or value.startswith("=")
        names = [n for n in re.split(r"\s*,\s*", value.lstrip("=")) if n]
        for n in names:
            found = n in have if exact else any(i.startswith(n) for i in have)
            if not found:
                out.append(
                    f"{var}={value!r} names {'interface' if exact else 'prefix'} {n!r}, which "
                    f"no interface of this node has (it has: {', '.join(have) or 'none'})"
                )
    return out


def node_interfaces(sysfs: Path = Path("/sys/class/net")) -> list[str]:
    try:
        return sorted(p.name for p in sysfs.iterdir())
    except OSError:
        return []


def ifname_result_file(node: str, problems: Sequence[str], env_file: str) -> ResultFile:
    return net_result_file(
        "probe-ifaces",
        node,
        [
            Record(
                name="socket interfaces (nccl.env)",
                status="fail" if problems else "pass",
                node=node,
                value="; ".join(problems) or "ok",
                message="; ".join(problems) or f"every interface named in {env_file} exists",
                remedy=""
                if not problems
                else f"fix {env_file} (cluster_network_interface, then make provision) or the "
                "interface; ip -br link lists this node's interfaces",
            )
        ],
    )
