"""``gpufleet probe serve|connect|mesh``: the TCP pre-check of make verify (gpufleet.node.netprobe).

``mesh`` is what verify runs on every node, all at once: ``serve`` in a thread (ports bound
before any connect), then ``connect`` to the rendezvous and the other nodes (a refused
connection is retried until ``--start-window`` s after the start: that peer's listener may
not be up yet; with ``--started-file``, until ``--start-grace`` s after that file appears,
which verify's controller creates once every node's mesh was started), then the listener
is kept until it has seen every expected peer or the peers' tries must be over (the end
of the window plus ``--timeout`` x (``--retries`` + 1)), bounded by ``--duration``.
One process per node instead of a listener job, a probe and a stop (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufleet import argtypes
from gpufleet.commands import add_command
from gpufleet.node import netprobe
from gpufleet.planning import network as netcfg


def register(sub: Any) -> None:
    p = add_command(
        sub,
        "probe",
        "TCP reachability pre-check between nodes (rendezvous + mesh)",
        netprobe.__doc__,
    )
    _add_arguments(p)
    p.set_defaults(func=run)


def _serve_arguments(s: argparse.ArgumentParser, result_flag: str) -> None:
    s.add_argument("--name", default=socket.gethostname(), help="this node's name")
    s.add_argument("--bind", default="0.0.0.0")
    s.add_argument("--port", type=argtypes.port, action="append", required=True)
    s.add_argument("--duration", type=argtypes.timeout_s, default=60.0, help="seconds, hard limit")
    s.add_argument("--expect", type=argtypes.count, default=0, help="stop after N connections")
    s.add_argument("--pidfile", default="", help="write this process's PID here")
    s.add_argument(
        "--rendezvous-port",
        type=argtypes.port,
        default=None,
        help="which of the ports is torchrun's rendezvous port (for messages)",
    )
    s.add_argument(
        result_flag,
        dest="listen_result_json",
        default="",
        help="on a port held by another process, write a ResultFile (kind probe-listen)",
    )


def _connect_arguments(c: argparse.ArgumentParser, with_name: bool) -> None:
    if with_name:
        c.add_argument("--name", default=socket.gethostname(), help="this node's name")
    c.add_argument("--target", action="append", default=[], help="NAME=HOST:PORT[:ROLE]")
    c.add_argument("targets", nargs="*", metavar="NAME=HOST:PORT[:ROLE]", help="more targets")
    c.add_argument("--timeout", type=argtypes.timeout_s, default=3.0, help="seconds per try")
    c.add_argument("--retries", type=argtypes.retries, default=3)
    c.add_argument("--json", default="", help="write results here")
    c.add_argument("--result-json", default="", help="write a ResultFile (kind probe) here")
    c.add_argument(
        "--env-file",
        default="",
        help="check the interfaces named in this env file (nccl.env) exist here",
    )
    c.add_argument(
        "--ifaces-json",
        default="",
        help="write that check as a ResultFile (kind probe-ifaces) here",
    )


def _add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="probe_cmd", metavar="SUBCOMMAND", required=True)
    _serve_arguments(sub.add_parser("serve", help="listen on ports for a while"), "--result-json")
    _connect_arguments(
        sub.add_parser("connect", help="connect to targets, report blocked pairs"), True
    )
    m = sub.add_parser(
        "mesh", help="serve and connect in one process (what verify runs on every node)"
    )
    _serve_arguments(m, "--listen-result-json")
    _connect_arguments(m, False)
    m.add_argument(
        "--start-window",
        type=argtypes.timeout_s,
        default=15.0,
        help="seconds within which every node's mesh starts: a refused connection is retried "
        "until then (default 15); with --started-file, the most it can be",
    )
    m.add_argument(
        "--ready-file",
        default="",
        help="create this file once the listeners are bound (verify's start of the mesh waits "
        "for it: gpufleet.core.node_job ready_file)",
    )
    m.add_argument(
        "--started-file",
        default="",
        help="a file whose appearance says every node's mesh has been started (verify: the "
        "controller's wait for the job began, gpufleet.verify.detached_job): a refused "
        "connection is then retried only --start-grace s more",
    )
    m.add_argument(
        "--start-grace",
        type=argtypes.timeout_s,
        default=5.0,
        help="seconds a refused connection is still retried after --started-file appears "
        "(default 5; with --ready-file every listener was bound by then)",
    )


def _serve(
    args: argparse.Namespace,
    stop: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> int:
    roles = {args.rendezvous_port: "rendezvous"} if args.rendezvous_port else {}
    busy: list[netprobe.PortInUse] = []

    def on_busy(exc: netprobe.PortInUse) -> None:
        # recorded at once (the listener may be stopped before it ends), then the
        # node's other ports are served so that only this one is reported
        busy.append(exc)
        print(f"ERROR: {exc}", flush=True)
        if args.listen_result_json:
            netprobe.listen_failure_file(args.name, busy).write(args.listen_result_json)

    try:
        n = netprobe.serve(
            args.name,
            args.bind,
            args.port,
            args.duration,
            args.expect,
            roles,
            on_busy,
            stop=stop,
            ready=ready,
        )
    except netprobe.PortInUse as exc:
        if args.listen_result_json:
            netprobe.listen_failure_file(args.name, [*busy, exc]).write(args.listen_result_json)
        raise
    print(f"{args.name}: accepted {n} connection(s) on {args.bind}:{args.port}", flush=True)
    return 1 if busy else 0


def _connect(args: argparse.Namespace, up_until: float | Callable[[], float] = 0.0) -> int:
    iface_problems: list[str] = []
    if args.env_file:
        env = netcfg.read_env_file(args.env_file)
        iface_problems = netprobe.ifname_problems(env, netprobe.node_interfaces())
        for line in iface_problems:
            print(f"BLOCKED {args.name}: {line}")
        if args.ifaces_json:
            netprobe.ifname_result_file(args.name, iface_problems, args.env_file).write(
                args.ifaces_json
            )
    targets = [netprobe.parse_target(t) for t in [*args.target, *args.targets]]
    t0 = time.time()
    results = netprobe.probe(args.name, targets, args.timeout, args.retries, up_until=up_until)
    for r in results:
        print(r.line(), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8"
        )
    if args.result_json:
        netprobe.result_file(args.name, results, time.time() - t0).write(args.result_json)
    return 0 if all(r.ok for r in results) and not iface_problems else 1


class StartWindow:
    """Until when a refused connection is retried: the peers start without a barrier, each
    whenever the controller's start reaches it. Without a started file, ``window`` s after
    this node's start; with one, ``grace`` s after the file appeared (every peer has been
    started by then, whatever the number of nodes and the controller's load), never past
    ``window``. A node that dropped its file (an older controller) keeps the fixed window."""

    def __init__(self, start: float, window: float, started_file: str, grace: float) -> None:
        self.start, self.window, self.grace = start, window, grace
        self.started_file = Path(started_file) if started_file else None
        self.seen: float | None = None

    def until(self) -> float:
        cap = self.start + self.window
        if self.started_file is None:
            return cap
        if self.seen is None and self.started_file.exists():
            self.seen = time.monotonic()
        return cap if self.seen is None else min(cap, self.seen + self.grace)


def _mesh(args: argparse.Namespace) -> int:
    stop, ready = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def listener() -> None:
        try:
            box["rc"] = _serve(args, stop, ready)
        except Exception as exc:  # reported below, after this node's own probes
            box["error"] = exc
        finally:
            ready.set()

    start = time.monotonic()
    window = StartWindow(start, args.start_window, args.started_file, args.start_grace)
    thread = threading.Thread(target=listener, name="probe-listener", daemon=True)
    thread.start()
    ready.wait(timeout=30)
    if args.ready_file:  # the controller's start returns now: the next node's may begin
        Path(args.ready_file).touch()
    # a peer whose listener is not up yet refuses: retried until the start window ends
    rc = _connect(args, up_until=window.until)
    # the peers' tries are over once the window has ended and their tries ran out: the
    # listener is kept until then (the window can still move: asked again every half second)
    tries = args.timeout * (args.retries + 1)
    while thread.is_alive():
        left = min(start + args.duration, window.until() + tries) - time.monotonic()
        if left <= 0:
            break
        thread.join(timeout=min(left, 0.5))
    stop.set()
    thread.join(timeout=5)
    if "error" in box:
        print(f"ERROR: {box['error']}", flush=True)
        return 1
    return rc or int(box.get("rc", 1))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "pidfile", ""):
        Path(args.pidfile).write_text(f"{os.getpid()}\n", encoding="utf-8")
    if args.probe_cmd == "serve":
        return _serve(args)
    if args.probe_cmd == "mesh":
        return _mesh(args)
    return _connect(args)
