"""`python -m tbctl up|down|status|clean|exec|monitor-wait` (run through the Makefile's testbed-*
targets)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

from . import cuda_wheels, host_limits, mirror, monitor, nodes, render, rootfs, slurm
from .config import (
    BRIDGE,
    BRIDGE_ADDRESS,
    DEFAULT_NODES,
    INVENTORY_DIR,
    RELEASES,
    RUN_DIR,
    STATE_DIR,
    SUBNET,
    Node,
    make_nodes,
    mirror_url,
    parse_gpu,
    parse_hgx,
    parse_mix,
)
from .sh import TestbedError, run, say

REQUIRED_TOOLS = (
    "debootstrap",
    "rpmbuild",
    "rpmsign",
    "createrepo_c",
    "modifyrepo_c",
    "gpg",
    "ssh-keygen",
    "ssh",
    "ip",
    "unshare",
    "nsenter",
    "chroot",
)


def _need_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (namespaces, mounts, bridge): run as root")
    missing = [t for t in REQUIRED_TOOLS if shutil.which(t) is None]
    if missing:
        raise TestbedError(f"missing tools: {', '.join(missing)}; run `make testbed-deps`")


OWNER_FILE = Path("/run/gpufleet-testbed.owner")


def _check_owner(claim: bool) -> None:
    """One testbed per machine: the kernel names (gftb-*) and the subnet are global. Refuse
    to touch a testbed that another checkout started."""
    try:
        owner = OWNER_FILE.read_text().strip()
    except OSError:
        owner = ""
    if owner and owner != str(STATE_DIR) and (nodes.our_netns() or nodes._link_exists(BRIDGE)):
        raise TestbedError(
            f"a testbed started from {owner} is up on this machine; run `make testbed-down` "
            f"in that checkout first (or delete {OWNER_FILE} if that checkout is gone)"
        )
    if claim:
        OWNER_FILE.write_text(f"{STATE_DIR}\n")


def write_inventory(
    node_list: list[Node],
    fpr: str,
    with_slurm: bool = False,
    torch_wheels: str = "cpu",
    with_monitor: bool = False,
) -> Path:
    INVENTORY_DIR.mkdir(parents=True, exist_ok=True)
    (INVENTORY_DIR / "group_vars").mkdir(exist_ok=True)
    hosts = INVENTORY_DIR / "hosts.yml"
    house = mirror_url() if torch_wheels == "cuda" else ""
    hosts.write_text(
        render.hosts_text(node_list, str(nodes.CLIENT_KEY), str(nodes.KNOWN_HOSTS), house)
    )
    info = render.MirrorInfo(
        url=mirror_url(),
        cuda_key_file=mirror.key_file_name(fpr),
        fingerprint=fpr,
        bridge_address=BRIDGE_ADDRESS,
        cidr=str(SUBNET),
        slurm=with_slurm,
        torch_wheels=torch_wheels,
        monitor=with_monitor,
    )
    (INVENTORY_DIR / "group_vars" / "all.yml").write_text(render.group_vars_text(info))
    return hosts


def cmd_up(args: argparse.Namespace) -> int:
    _need_root()
    t0 = time.monotonic()
    node_list = make_nodes(
        args.nodes, parse_mix(args.mix), parse_hgx(args.hgx), parse_gpu(args.gpu)
    )
    _check_owner(claim=True)
    existing = nodes.node_names_from_state()
    extra = [n for n in existing if int(n.removeprefix("node")) > args.nodes]
    for name in extra:
        say(f"{name}: not wanted with NODES={args.nodes}; removing it")
        gone = Node(int(name.removeprefix("node")), RELEASES["alma8"])
        nodes.stop_node(gone)
        nodes.clear_dir(gone.run_dir)
    base = rootfs.build()
    rootfs.check_python(base)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    host_limits.ensure(len(node_list))
    nodes.ensure_bridge()
    fpr, _ = mirror.build_repos()
    pip = [sys.executable, "-m", "pip"]
    mirror.build_wheelhouse(pip)
    if args.torch_wheels == "cuda":
        cuda_wheels.download(cuda_wheels.CUDA_CACHE, cuda_wheels.read_pin())
        mirror.build_cuda_index()
    mirror.start_http()
    nodes.ensure_client_key()
    nodes.write_known_hosts(node_list)
    for n in node_list:
        nodes.ensure_node(n, node_list)
    if args.slurm or slurm.enabled():
        slurm.up(node_list)
    if args.monitor or monitor.enabled():
        monitor.up(node_list)
    inv = write_inventory(
        node_list,
        fpr,
        with_slurm=args.slurm or slurm.enabled(),
        torch_wheels=args.torch_wheels,
        with_monitor=args.monitor or monitor.enabled(),
    )
    say(
        f"testbed up: {len(node_list)} node(s) in {time.monotonic() - t0:.0f}s; "
        f"mirror {mirror_url()}/"
    )
    for n in node_list:
        print(f"   {n.name}  {n.address}  {n.release.pretty_name}")
    say(f"inventory: {inv}")
    print(f"TESTBED_INVENTORY={inv.parent}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    _need_root()
    _check_owner(claim=False)
    t0 = time.monotonic()
    monitor.down()  # the host's Prometheus; the nodes' exporters end with the nodes
    for name in nodes.node_names_from_state():
        n = Node(int(name.removeprefix("node")), RELEASES["alma8"])
        nodes.stop_node(n)
    mirror.stop_http()
    mirror.stop_gpg_agent()
    nodes.remove_bridge()
    host_limits.restore()
    for link in nodes.our_links():  # veths whose netns vanished without us
        run(["ip", "link", "del", link], what=f"deleting stray link {link}", check=False)
    for cg in nodes.our_cgroups():
        nodes._rmdir_cgroup(Path(cg))
    left = nodes.our_mounts(STATE_DIR)
    if left:
        raise TestbedError(f"mounts still under {STATE_DIR}: {left}; unmount them by hand")
    nodes.clear_dir(RUN_DIR)
    nodes.clear_dir(INVENTORY_DIR)
    OWNER_FILE.unlink(missing_ok=True)
    say(
        f"testbed down in {time.monotonic() - t0:.0f}s (cached base rootfs and wheels kept; "
        "`make testbed-clean` removes them)"
    )
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    cmd_down(args)
    if STATE_DIR.exists():
        say(f"removing {STATE_DIR} (base rootfs and wheel cache)")
        shutil.rmtree(STATE_DIR)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    names = nodes.node_names_from_state()
    http = mirror.http_running()
    print(f"bridge {BRIDGE}: {'up' if nodes._link_exists(BRIDGE) else 'absent'}")
    print(f"mirror {mirror_url()}/: {f'serving (pid {http})' if http else 'stopped'}")
    print(f"base rootfs: {'cached' if rootfs.is_current() else 'not built'} ({rootfs.ROOTFS})")
    prom = monitor.prometheus_pid()
    print(f"prometheus http://{monitor.LISTEN}: {f'running (pid {prom})' if prom else 'stopped'}")
    if not names:
        print("nodes: none")
    for name in names:
        n = Node(int(name.removeprefix("node")), RELEASES["alma8"])
        pid = nodes.init_pid(n)
        state = "stopped"
        if pid:
            r = nodes.node_exec(n, ["systemctl", "is-system-running"], check=False)
            state = f"systemd {r.stdout.strip()} (pid {pid})"
        print(f"{name}: {n.address} netns={'yes' if nodes.netns_exists(n.netns) else 'no'} {state}")
    inv = INVENTORY_DIR / "hosts.yml"
    print(f"inventory: {inv if inv.exists() else 'not written'}")
    return 0


def cmd_exec(args: argparse.Namespace) -> NoReturn:
    """Run a command inside a node (namespaces entered directly, no SSH): replaces tbctl."""
    n = Node(int(args.node.removeprefix("node")), RELEASES["alma8"])
    pid = nodes.init_pid(n)
    if pid is None:
        raise TestbedError(f"{args.node} is not running; run `make testbed-up`")
    os.execvp("nsenter", [*nodes.nsenter(n, pid), *(args.command or ["/bin/bash", "-l"])])


def cmd_monitor_wait(args: argparse.Namespace) -> int:
    """Wait until Prometheus has every node's gpufleet metrics (make demo MONITOR=1)."""
    names = nodes.node_names_from_state()
    seen = monitor.wait_for_nodes(names, args.timeout)
    say(f"Prometheus http://{monitor.LISTEN} has gpufleet's metrics of {', '.join(sorted(seen))}")
    for name in sorted(seen):
        print(f"   {name}  last pass {time.strftime('%H:%M:%S', time.localtime(seen[name]))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tbctl", description="gpufleet simulated EL cluster")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build (cached) and start the testbed; idempotent")
    up.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", DEFAULT_NODES)))
    up.add_argument(
        "--mix",
        default=os.environ.get("TESTBED_MIX", ""),
        help=f"EL releases, cycled over the nodes ({', '.join(RELEASES)})",
    )
    up.add_argument(
        "--hgx",
        default=os.environ.get("TESTBED_HGX", ""),
        help="nodes posing as NVSwitch HGX systems: node1=b200,node3=h100 (boards h100, b200); "
        "applied when a node boots (testbed-down first to change it)",
    )
    up.add_argument(
        "--gpu",
        default=os.environ.get("TESTBED_GPU", ""),
        help="nodes posing as PCIe GPU nodes: node2,node3 (two H100 PCIe each, nouveau bound "
        "at first boot, the driver's state across reboots; docs/testbed.md); applied when a "
        "node boots (testbed-down first to change it)",
    )
    up.add_argument(
        "--slurm",
        action="store_true",
        default=os.environ.get("TESTBED_SLURM", "").lower() in ("1", "true", "yes", "on"),
        help="also run Slurm (slurmctld on node1, slurmd everywhere); kept until testbed-down",
    )
    up.add_argument(
        "--torch-wheels",
        choices=("cpu", "cuda"),
        default=os.environ.get("TESTBED_TORCH_WHEELS") or "cpu",
        help="cpu: torch's CPU build from the wheelhouse (fast, the default); cuda: PyPI's "
        "CUDA build of the pinned torch (~2.7 GB, downloaded once) from a PyPI-layout index, "
        "the last node from a find-links wheelhouse with no index (docs/testbed.md)",
    )
    up.add_argument(
        "--monitor",
        action="store_true",
        default=os.environ.get("TESTBED_MONITOR", "").lower() in ("1", "true", "yes", "on"),
        help="also run the site's monitoring: Debian's prometheus-node-exporter in every node, "
        "Debian's prometheus on 127.0.0.1:9090 with gpufleet's rules; kept until testbed-down",
    )
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="remove everything but the caches; safe twice").set_defaults(
        func=cmd_down
    )
    sub.add_parser("clean", help="down, then remove the caches").set_defaults(func=cmd_clean)
    sub.add_parser("status", help="what runs").set_defaults(func=cmd_status)
    mw = sub.add_parser(
        "monitor-wait", help="wait until Prometheus has every node's gpufleet_health_ metrics"
    )
    mw.add_argument("--timeout", type=float, default=120.0)
    mw.set_defaults(func=cmd_monitor_wait)
    ex = sub.add_parser("exec", help="run a command in a node: exec node1 -- dnf repolist")
    ex.add_argument("node")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=cmd_exec)
    args = p.parse_args(argv)
    if getattr(args, "command", None) and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        return int(args.func(args))
    except (TestbedError, ValueError) as exc:
        print(f"!! testbed: {exc}", file=sys.stderr)
        return 1
