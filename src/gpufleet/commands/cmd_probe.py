"""``gpufleet probe serve|connect|mesh``: the TCP pre-check of make verify (gpufleet.node.netprobe).

``mesh`` is what verify runs on every node, all at once: ``serve`` in a thread (ports bound
before any connect), then ``connect`` to the rendezvous and the other nodes (a refused
connection is retried until ``--start-window`` s after the start: that peer's listener may
not be up yet), then the listener is kept until it has seen every expected peer or the
peers' tries must be over (the start window plus ``--timeout`` x (``--retries`` + 1)),
bounded by ``--duration``.
One process per node instead of a listener job, a probe and a stop (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import time
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
        "until then (default 15)",
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


def _connect(args: argparse.Namespace, up_until: float = 0.0) -> int:
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
    thread = threading.Thread(target=listener, name="probe-listener", daemon=True)
    thread.start()
    ready.wait(timeout=30)
    # a peer whose listener is not up yet refuses: retried until the start window ends
    rc = _connect(args, up_until=start + args.start_window)
    # the peers started within the start window: their tries are over by then
    last = start + args.start_window + args.timeout * (args.retries + 1)
    thread.join(timeout=max(0.0, min(start + args.duration, last) - time.monotonic()))
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
