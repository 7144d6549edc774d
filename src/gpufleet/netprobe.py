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

import argparse
import contextlib
import datetime
import errno
import json
import os
import selectors
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gpufleet.errors import GpufleetError, RefusedError
from gpufleet.results import Record, ResultFile


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
) -> list[ProbeResult]:
    results = []
    for t in targets:
        ok, err, extra, secs = False, "", "", 0.0
        for attempt in range(max(1, retries)):
            ok, err, extra, secs = connect_once(t, timeout)
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


def serve(name: str, bind: str, ports: Sequence[int], duration: float, expect: int = 0) -> int:
    """Accept connections until ``duration`` or ``expect`` accepted; return the count."""
    sel = selectors.DefaultSelector()
    socks = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((bind, port))
            except OSError as exc:
                s.close()
                raise RefusedError(
                    f"{name}: cannot listen on {bind}:{port} ({exc}); is a previous run "
                    "still holding it? (make verify cleans up by PID; check ss -ltnp)"
                ) from exc
            s.listen(64)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            socks.append(s)
        accepted = 0
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline and not (expect and accepted >= expect):
            for key, _ in sel.select(timeout=min(0.5, max(0.0, deadline - time.monotonic()))):
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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="gpufleet probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    try:
        return run(p.parse_args(argv))
    except GpufleetError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return exc.exit_code


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="probe_cmd", required=True)
    s = sub.add_parser("serve", help="listen on ports for a while")
    s.add_argument("--name", default=socket.gethostname())
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=int, action="append", required=True)
    s.add_argument("--duration", type=float, default=60.0, help="seconds, hard limit")
    s.add_argument("--expect", type=int, default=0, help="stop after N connections")
    s.add_argument("--pidfile", default="", help="write this process's PID here")
    c = sub.add_parser("connect", help="connect to targets, report blocked pairs")
    c.add_argument("--name", default=socket.gethostname(), help="this node's name")
    c.add_argument("--target", action="append", default=[], help="NAME=HOST:PORT[:ROLE]")
    c.add_argument("targets", nargs="*", metavar="NAME=HOST:PORT[:ROLE]", help="more targets")
    c.add_argument("--timeout", type=float, default=3.0, help="seconds per try")
    c.add_argument("--retries", type=int, default=3)
    c.add_argument("--json", default="", help="write results here")
    c.add_argument("--result-json", default="", help="write a ResultFile (kind probe) here")


def run(args: argparse.Namespace) -> int:
    if args.probe_cmd == "serve":
        if args.pidfile:
            Path(args.pidfile).write_text(f"{os.getpid()}\n", encoding="utf-8")
        n = serve(args.name, args.bind, args.port, args.duration, args.expect)
        print(f"{args.name}: accepted {n} connection(s) on {args.bind}:{args.port}")
        return 0
    targets = [parse_target(t) for t in [*args.target, *args.targets]]
    t0 = time.time()
    results = probe(args.name, targets, args.timeout, args.retries)
    for r in results:
        print(r.line())
    if args.json:
        Path(args.json).write_text(
            json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8"
        )
    if args.result_json:
        result_file(args.name, results, time.time() - t0).write(args.result_json)
    return 0 if all(r.ok for r in results) else 1


def result_file(node: str, results: Sequence[ProbeResult], duration: float) -> ResultFile:
    recs = [
        Record(
            name=f"reach {r.target} {r.host}:{r.port} ({r.role})",
            status="pass" if r.ok else "fail",
            node=node,
            value=round(r.seconds * 1000, 2),
            message=r.line(),
            remedy=""
            if r.ok
            else (
                f"{r.cause}. On {r.target}: firewall-cmd --list-all; ss -ltn | grep {r.port}; "
                f"ip -br addr (is {r.host} on the cluster network?)"
            ),
        )
        for r in results
    ]
    return ResultFile(
        kind="probe",
        node=node,
        mode="net",
        started=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=duration,
        records=recs,
    )


if __name__ == "__main__":
    sys.exit(main())
