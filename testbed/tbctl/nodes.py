"""Nodes: a network namespace on the testbed bridge, and a systemd booted as PID 1 of its
own PID/mount/UTS/IPC namespaces on an overlay of the cached base rootfs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from . import render
from .config import BRIDGE, BRIDGE_ADDRESS, PREFIX, RUN_DIR, SUBNET, Node
from .rootfs import ROOTFS
from .sh import TestbedError, run, say, wait_for, warn

CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"))
SSH_DIR = RUN_DIR / "ssh"
CLIENT_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
BOOT_TIMEOUT = float(os.environ.get("TESTBED_BOOT_TIMEOUT", "90"))

START_SCRIPT = r"""
set -euo pipefail
# Runs as PID 1 of the node's new PID namespace, in its own mount/UTS/IPC namespaces, inside
# the node's network namespace. Every mount below lives only in this mount namespace and
# disappears with the node (and with each reboot: LAUNCH_SCRIPT runs this again).
hostname "$NODE"
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$UPPER,workdir=$WORK" "$ROOT"
mount -t proc proc "$ROOT/proc"
# this boot's id (LAUNCH_SCRIPT draws one per boot): what `ansible.builtin.reboot` compares
mount --bind "$BOOT_ID_FILE" "$ROOT/proc/sys/kernel/random/boot_id"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$ROOT/sys"
if [ "$GPU_POSE" = 1 ]; then
  # TESTBED_GPU: the node's /sys/module is the pose's (the host kernel loads no module), as
  # the kernel would leave it at boot: nouveau binds the GPUs unless a modprobe.d file
  # blacklists it, else nvidia loads when DKMS built it for the running kernel.
  mount -t tmpfs -o mode=755,size=1m,nosuid,nodev,noexec tmpfs "$ROOT/sys/module"
  for m in /sys/module/*; do mkdir -p "$ROOT/sys/module/${m##*/}"; done
  ko="$ROOT/lib/modules/$(uname -r)/extra/nvidia.ko.xz"
  if ! grep -qsE '^[[:space:]]*blacklist[[:space:]]+nouveau' \
      "$ROOT"/etc/modprobe.d/*.conf "$ROOT"/usr/lib/modprobe.d/*.conf; then
    mkdir -p "$ROOT/sys/module/nouveau"
    echo ">> $NODE: nouveau bound the GPUs (not blacklisted)"
  elif [ -r "$ko" ] && version=$(sed -n 's/^version=//p' "$ko") && [ -n "$version" ]; then
    mkdir -p "$ROOT/sys/module/nvidia"
    echo "$version" > "$ROOT/sys/module/nvidia/version"
    echo ">> $NODE: nvidia $version loaded"
  else
    echo ">> $NODE: no GPU driver loaded (nouveau blacklisted, no nvidia module for $(uname -r))"
  fi
fi
mount -t tmpfs -o mode=755,nosuid,nodev,noexec tmpfs "$ROOT/sys/fs/cgroup"
mkdir -p "$ROOT/sys/fs/cgroup/systemd" "$ROOT/sys/fs/cgroup/unified"
mount --bind "$CG_SYSTEMD" "$ROOT/sys/fs/cgroup/systemd"
mount --bind "$CG_UNIFIED" "$ROOT/sys/fs/cgroup/unified"
echo 0 > "$CG_SYSTEMD/cgroup.procs"
echo 0 > "$CG_UNIFIED/cgroup.procs"
mount -t tmpfs -o mode=755,size=64m,nosuid tmpfs "$ROOT/dev"
for d in null zero full random urandom tty; do
  touch "$ROOT/dev/$d"; mount --bind "/dev/$d" "$ROOT/dev/$d"
done
mkdir -p "$ROOT/dev/pts" "$ROOT/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$ROOT/dev/pts"
ln -sf pts/ptmx "$ROOT/dev/ptmx"
mount -t tmpfs -o mode=1777,size=2g,nosuid,nodev tmpfs "$ROOT/dev/shm"
ln -sf /proc/self/fd "$ROOT/dev/fd"
mount -t tmpfs -o mode=755,size=256m,nosuid,nodev tmpfs "$ROOT/run"
echo ">> $NODE: exec systemd (PID 1 of the node)"
exec chroot "$ROOT" /usr/bin/env -i container=gpufleet-testbed \
  PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 /lib/systemd/systemd --log-target=journal
"""

# The node's launcher, on the host: boots the node (START_SCRIPT) and boots it again when
# its systemd reboots. In a PID namespace, reboot(2) ends the namespace's PID 1 with SIGHUP
# (poweroff: SIGINT); unshare --fork passes that signal on, so the loop sees 128+1. Each boot
# draws a new boot id and appends "boot <epoch> <id>" / "down <epoch> rc=<rc>" to boots.log.
LAUNCH_SCRIPT = r"""
set -u
while :; do
  id=$(cat /proc/sys/kernel/random/uuid)
  # a new file per boot (the old boot's bind mount went with its mount namespace)
  printf '%s\n' "$id" > "$BOOT_ID_FILE.new" && mv -f "$BOOT_ID_FILE.new" "$BOOT_ID_FILE"
  echo "boot $(date +%s.%N) $id" >> "$BOOTS_LOG"
  nsenter --net="/run/netns/$NETNS" unshare --mount --uts --ipc --pid --fork \
    --propagation private bash -c "$START_SCRIPT"
  rc=$?
  echo "down $(date +%s.%N) rc=$rc" >> "$BOOTS_LOG"
  [ "$rc" = 129 ] || exit "$rc"
  echo ">> $NODE: its systemd rebooted; booting it again"
done
"""


# ---------------------------------------------------------------------------------------
# Network


def _link_exists(name: str, netns: str | None = None) -> bool:
    cmd = ["ip", *(["-n", netns] if netns else []), "link", "show", name]
    return subprocess.run(cmd, capture_output=True, check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def ensure_bridge() -> None:
    if not _link_exists(BRIDGE):
        say(f"network: creating bridge {BRIDGE} with {BRIDGE_ADDRESS}/{SUBNET.prefixlen}")
        run(["ip", "link", "add", BRIDGE, "type", "bridge"], what=f"creating bridge {BRIDGE}")
    addrs = run(
        ["ip", "-o", "-4", "addr", "show", "dev", BRIDGE],
        what="reading bridge address",
        capture=True,
    ).stdout
    if f"{BRIDGE_ADDRESS}/" not in addrs:
        run(
            ["ip", "addr", "add", f"{BRIDGE_ADDRESS}/{SUBNET.prefixlen}", "dev", BRIDGE],
            what=f"addressing bridge {BRIDGE}",
            fix=f"is {SUBNET} already used on this machine? set TESTBED_SUBNET",
        )
    run(["ip", "link", "set", BRIDGE, "up"], what=f"bringing {BRIDGE} up")


def ensure_node_network(node: Node) -> None:
    ns = node.netns
    if not netns_exists(ns):
        say(f"{node.name}: creating network namespace {ns}")
        run(["ip", "netns", "add", ns], what=f"{node.name}: ip netns add {ns}")
    created = not _link_exists("eth0", ns)
    if created:
        if _link_exists(node.veth_host):
            run(["ip", "link", "del", node.veth_host], what=f"{node.name}: removing stale veth")
        say(f"{node.name}: veth {node.veth_host} <-> eth0 {node.address}/{SUBNET.prefixlen}")
        run(
            ["ip", "link", "add", node.veth_host, "type", "veth", "peer", "name", node.veth_peer],
            what=f"{node.name}: creating veth pair",
        )
        run(["ip", "link", "set", node.veth_peer, "netns", ns], what=f"{node.name}: moving veth")
        run(
            ["ip", "-n", ns, "link", "set", node.veth_peer, "name", "eth0"],
            what=f"{node.name}: renaming veth to eth0",
        )
    run(
        ["ip", "link", "set", node.veth_host, "master", BRIDGE, "up"],
        what=f"{node.name}: attaching {node.veth_host} to {BRIDGE}",
    )
    addrs = run(
        ["ip", "-n", ns, "-o", "-4", "addr", "show", "dev", "eth0"],
        what=f"{node.name}: reading eth0",
        capture=True,
    ).stdout
    if f"{node.address}/" not in addrs:
        run(
            ["ip", "-n", ns, "addr", "add", f"{node.address}/{SUBNET.prefixlen}", "dev", "eth0"],
            what=f"{node.name}: addressing eth0",
        )
    run(["ip", "-n", ns, "link", "set", "eth0", "up"], what=f"{node.name}: eth0 up")
    run(["ip", "-n", ns, "link", "set", "lo", "up"], what=f"{node.name}: lo up")
    if created:
        # A node made again at an address an earlier one had (a resize: NODES=6, 3, then 6)
        # has a new MAC; neighbour entries of the old one, on the host and in the other
        # nodes, can send traffic to the old MAC until they expire. The likely cause of
        # make bench-scale's "Connection timed out" to the re-made node5 and node6 (they
        # answered a minute later). Forget them.
        for where in ([], *(["-n", other] for other in our_netns() if other != ns)):
            subprocess.run(
                ["ip", *where, "neigh", "flush", "to", node.address],
                capture_output=True,
                check=False,
            )


# ---------------------------------------------------------------------------------------
# SSH keys


def ensure_client_key() -> None:
    SSH_DIR.mkdir(parents=True, exist_ok=True)
    SSH_DIR.chmod(0o700)
    if not CLIENT_KEY.exists():
        say(f"ssh: generating the testbed client key {CLIENT_KEY}")
        run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "gpufleet-testbed-client",
                "-f",
                CLIENT_KEY,
            ],
            what="generating the client key",
        )


def ensure_host_key(node: Node) -> str:
    key = node.run_dir / "ssh_host_ed25519_key"
    if not key.exists():
        node.run_dir.mkdir(parents=True, exist_ok=True)
        run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{node.name}-host", "-f", key],
            what=f"{node.name}: generating the host key",
        )
    pub = key.with_suffix(".pub").read_text().split()
    return f"{pub[0]} {pub[1]}"


def write_known_hosts(nodes: list[Node]) -> None:
    entries = [([n.address, n.name], ensure_host_key(n)) for n in nodes]
    KNOWN_HOSTS.write_text(render.known_hosts(entries))


# ---------------------------------------------------------------------------------------
# Node files and boot


def _write(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    dest = root / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_symlink():
        dest.unlink()
    dest.write_text(text)
    dest.chmod(mode)


def hosts_file(nodes: list[Node]) -> str:
    hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
    hosts += "".join(f"{n.address} {n.name}\n" for n in nodes)
    return hosts + f"{BRIDGE_ADDRESS} testbed-mirror\n"


def prepare_upper(node: Node, nodes: list[Node]) -> None:
    """Write the node's own files into its overlay upper dir (the node is not running)."""
    up = node.run_dir / "upper"
    for d in ("upper", "work", "root"):
        (node.run_dir / d).mkdir(parents=True, exist_ok=True)
    for path, text in render.release_files(node.release).items():
        _write(up, path, text)
    _write(up, "/etc/hostname", node.name + "\n")
    _write(up, "/etc/hosts", hosts_file(nodes))
    _write(up, "/etc/machine-id", os.urandom(16).hex() + "\n", 0o444)
    _write(up, "/etc/dnf/vars/releasever", f"{node.release.major}\n")
    key = node.run_dir / "ssh_host_ed25519_key"
    _write(up, "/etc/ssh/gftb_host_ed25519_key", key.read_text(), 0o600)
    _write(up, "/etc/ssh/gftb_host_ed25519_key.pub", key.with_suffix(".pub").read_text())
    _write(up, "/etc/ssh/sshd_config.d/00-gpufleet-testbed.conf", render.sshd_config(node.address))
    _write(up, "/root/.ssh/authorized_keys", CLIENT_KEY.with_suffix(".pub").read_text(), 0o600)
    (up / "root/.ssh").chmod(0o700)
    if node.hgx:
        say(f"{node.name}: posing as an HGX {node.hgx} system (NVSwitches in lspci, HCAs)")
        for path, (text, mode) in render.hgx_files(node.hgx).items():
            _write(up, path, text, mode)
    if node.gpu:
        say(f"{node.name}: posing as a PCIe GPU node (2x {render.GPU_NAME}, nouveau at first boot)")
        for path, (text, mode) in render.gpu_files().items():
            _write(up, path, text, mode)


def _cgroup_dirs(node: Node) -> list[Path]:
    return [root / f"{PREFIX}-{node.name}" for root in CGROUP_ROOTS]


def _children(pid: int) -> list[int]:
    try:
        return [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def launcher_pid(node: Node) -> int | None:
    """Host PID of the node's launcher loop (LAUNCH_SCRIPT), if it runs."""
    try:
        pid = int((node.run_dir / "launcher.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _comm(pid) == "bash" else None


def _init_of_launcher(node: Node) -> int | None:
    """The launcher's current boot: launcher -> unshare (nsenter exec()s it) -> systemd."""
    launcher = launcher_pid(node)
    if launcher is None:
        return None
    for u in _children(launcher):
        if _comm(u) == "unshare":
            kids = [k for k in _children(u) if _comm(k) == "systemd"]
            if kids:
                return kids[0]
    return None


def init_pid(node: Node) -> int | None:
    """Host PID of the node's systemd, if it runs in the node's network namespace (after a
    reboot inside the node: the new one, found through the launcher)."""
    try:
        ino = os.stat(f"/run/netns/{node.netns}").st_ino
    except OSError:
        return None

    def ours(pid: int | None) -> bool:
        try:
            net = os.readlink(f"/proc/{pid}/ns/net")
        except (OSError, TypeError):
            return False
        return _comm(pid or 0) == "systemd" and net == f"net:[{ino}]"

    try:
        cached: int | None = int((node.run_dir / "init.pid").read_text())
    except (OSError, ValueError):
        cached = None
    if ours(cached):
        return cached
    pid = _init_of_launcher(node)
    if not ours(pid):
        return None
    (node.run_dir / "init.pid").write_text(f"{pid}\n")
    return pid


def boots(node: Node) -> list[tuple[str, float, str]]:
    """The node's boots.log: ("boot", epoch, boot id) and ("down", epoch, "rc=N") rows."""
    try:
        text = (node.run_dir / "boots.log").read_text()
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        when, _, what = rest.partition(" ")
        try:
            rows.append((kind, float(when), what))
        except ValueError:
            continue
    return rows


def nsenter(node: Node, pid: int) -> list[str]:
    return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w"]


def node_exec(
    node: Node, cmd: list[str], *, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    pid = init_pid(node)
    if pid is None:
        raise TestbedError(f"{node.name} is not running; run `make testbed-up`")
    return run(
        [*nsenter(node, pid), *cmd],
        what=f"{node.name}: {' '.join(cmd)}",
        check=check,
        capture=True,
        timeout=timeout,
    )


def write_file(
    node: Node, path: str, data: bytes, mode: int, owner: tuple[int, int] = (0, 0)
) -> None:
    """Write ``path`` inside the running ``node`` (through its root, renamed into place)."""
    pid = init_pid(node)
    if pid is None:
        raise TestbedError(f"{node.name} is not running")
    dest = Path(f"/proc/{pid}/root") / path.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.gftb")
    tmp.write_bytes(data)
    os.chown(tmp, *owner)
    tmp.chmod(mode)
    tmp.replace(dest)


def boot(node: Node) -> int:
    for cg in _cgroup_dirs(node):
        cg.mkdir(exist_ok=True)
    env = dict(
        os.environ,
        NODE=node.name,
        NETNS=node.netns,
        ROOT=str(node.run_dir / "root"),
        LOWER=str(ROOTFS),
        UPPER=str(node.run_dir / "upper"),
        WORK=str(node.run_dir / "work"),
        CG_SYSTEMD=str(_cgroup_dirs(node)[0]),
        CG_UNIFIED=str(_cgroup_dirs(node)[1]),
        BOOT_ID_FILE=str(node.run_dir / "boot_id"),
        BOOTS_LOG=str(node.run_dir / "boots.log"),
        GPU_POSE="1" if node.gpu else "0",
        START_SCRIPT=START_SCRIPT,
    )
    log = (node.run_dir / "boot.log").open("a")
    say(f"{node.name}: booting systemd in netns {node.netns} ({node.release.pretty_name})")
    # nsenter --net (in LAUNCH_SCRIPT), not `ip netns exec`: the latter remounts /sys and
    # hides the cgroup trees
    proc = subprocess.Popen(
        ["bash", "-c", LAUNCH_SCRIPT],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd="/",
    )
    (node.run_dir / "launcher.pid").write_text(f"{proc.pid}\n")
    (node.run_dir / "init.pid").unlink(missing_ok=True)

    if not wait_for(lambda: init_pid(node) is not None or proc.poll() is not None, 20):
        raise TestbedError(f"{node.name}: systemd did not start; read {node.run_dir / 'boot.log'}")
    pid = init_pid(node)
    if pid is None:
        log.flush()
        tail = (node.run_dir / "boot.log").read_text(errors="replace").splitlines()[-15:]
        raise TestbedError(
            f"{node.name}: the node launcher exited ({proc.poll()}) before systemd started; "
            f"the end of {node.run_dir / 'boot.log'}:\n" + "\n".join(tail)
        )
    return pid


def wait_booted(node: Node) -> str:
    state = ""

    def ready() -> bool:
        nonlocal state
        pid = init_pid(node)
        if pid is None:
            return False
        r = subprocess.run(
            [*nsenter(node, pid), "systemctl", "is-system-running"],
            capture_output=True,
            text=True,
            check=False,
        )
        state = r.stdout.strip()
        return state in ("running", "degraded")

    if not wait_for(ready, BOOT_TIMEOUT, 0.5):
        raise TestbedError(
            f"{node.name}: systemd did not finish booting in {BOOT_TIMEOUT:.0f}s (state "
            f"'{state}'); inspect with `testbed/node {node.name} -- systemctl list-jobs`"
        )
    if state == "degraded":
        failed = node_exec(node, ["systemctl", "--failed", "--no-legend", "--plain"], check=False)
        warn(f"{node.name}: systemd is degraded; failed units: {failed.stdout.strip()}")
    return state


def ensure_node(node: Node, nodes: list[Node]) -> None:
    ensure_node_network(node)
    pid = init_pid(node)
    if pid is None:
        stop_node_processes(node)
        prepare_upper(node, nodes)
        boot(node)
        state = wait_booted(node)
        say(f"{node.name}: systemd is {state}")
    else:
        say(f"{node.name}: already running (systemd pid {pid})")
        # the node list may have changed: refresh /etc/hosts through the node's own root
        _write(Path(f"/proc/{pid}/root"), "/etc/hosts", hosts_file(nodes))
    for unit in ("ssh.service", "firewalld.service"):
        r = node_exec(node, ["systemctl", "is-active", unit], check=False)
        if r.stdout.strip() != "active":
            say(f"{node.name}: starting {unit}")
            node_exec(node, ["systemctl", "restart", unit], check=False)
    _wait_service(node, "ssh.service")
    _wait_service(node, "firewalld.service")
    ok = wait_for(
        lambda: (
            node_exec(node, ["firewall-cmd", "--state"], check=False).stdout.strip() == "running"
        ),
        30,
        0.5,
    )
    if not ok:
        log = node_exec(
            node, ["journalctl", "-u", "firewalld", "--no-pager", "-n", "30"], check=False
        ).stdout
        raise TestbedError(f"{node.name}: `firewall-cmd --state` does not say running.\n{log}")
    say(f"{node.name}: sshd on {node.address}:22, firewalld running")


def _wait_service(node: Node, unit: str) -> None:
    ok = wait_for(
        lambda: (
            node_exec(node, ["systemctl", "is-active", unit], check=False).stdout.strip()
            == "active"
        ),
        30,
        0.5,
    )
    if not ok:
        status = node_exec(
            node, ["systemctl", "status", "--no-pager", "-n", "20", unit], check=False
        ).stdout
        raise TestbedError(
            f"{node.name}: {unit} is not active.\n{status}\n"
            f"--- what to do: fix the unit, then rerun `make testbed-up`"
        )


# ---------------------------------------------------------------------------------------
# Teardown


def _kill_pidfile(pidfile: Path, expect: str) -> None:
    try:
        pid = int(pidfile.read_text())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        pidfile.unlink(missing_ok=True)
        return
    if comm == expect:
        os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def stop_node_processes(node: Node) -> None:
    pid = init_pid(node)
    # the launcher first: it would boot the node again
    _kill_pidfile(node.run_dir / "launcher.pid", "bash")
    if pid is not None:
        say(f"{node.name}: stopping (SIGKILL to the node's PID 1 {pid} ends every node process)")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), 10)
    (node.run_dir / "init.pid").unlink(missing_ok=True)
    # Fallback when the pid file is lost: every process left in the node's netns is ours.
    if netns_exists(node.netns):
        left = subprocess.run(
            ["ip", "netns", "pids", node.netns], capture_output=True, text=True, check=False
        ).stdout.split()
        for p in left:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(p), signal.SIGKILL)
        if left:
            say(f"{node.name}: killed {len(left)} leftover process(es) in netns {node.netns}")
            wait_for(
                lambda: (
                    not subprocess.run(
                        ["ip", "netns", "pids", node.netns],
                        capture_output=True,
                        text=True,
                        check=False,
                    ).stdout.split()
                ),
                10,
            )
    for cg in _cgroup_dirs(node):
        if cg.exists():
            # depth-first: systemd made slices and scopes below the node's cgroup
            for d in sorted((p for p in cg.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                _rmdir_cgroup(d)
            _rmdir_cgroup(cg)


def _rmdir_cgroup(d: Path) -> None:
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    warn(f"could not remove cgroup {d} (processes still in it?)")


def stop_node(node: Node) -> None:
    stop_node_processes(node)
    if netns_exists(node.netns):
        say(f"{node.name}: deleting network namespace {node.netns}")
        run(["ip", "netns", "del", node.netns], what=f"{node.name}: ip netns del")
    # Deleting the netns destroys the veth pair asynchronously: wait, then delete what is left.
    if not wait_for(lambda: not _link_exists(node.veth_host), 3, 0.1):
        subprocess.run(["ip", "link", "del", node.veth_host], capture_output=True, check=False)
        if _link_exists(node.veth_host):
            raise TestbedError(
                f"{node.name}: cannot delete veth {node.veth_host}; "
                f"try `ip link del {node.veth_host}` by hand"
            )


def our_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in out.stdout.splitlines() if line.startswith(f"{PREFIX}-")]


def our_links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True, check=False)
    try:
        links = json.loads(out.stdout or "[]")
    except json.JSONDecodeError:
        return []
    return [link["ifname"] for link in links if link.get("ifname", "").startswith(f"{PREFIX}-")]


def our_cgroups() -> list[str]:
    return [str(p) for root in CGROUP_ROOTS if root.is_dir() for p in root.glob(f"{PREFIX}-*")]


def our_mounts(state_dir: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [
        line.split()[4] for line in text.splitlines() if line.split()[4].startswith(str(state_dir))
    ]


def node_names_from_state() -> list[str]:
    d = RUN_DIR / "nodes"
    names = {p.name for p in d.iterdir()} if d.is_dir() else set()
    names |= {ns.removeprefix(f"{PREFIX}-") for ns in our_netns()}
    return sorted(n for n in names if re.fullmatch(r"node\d+", n))


def remove_bridge() -> None:
    if _link_exists(BRIDGE):
        say(f"network: deleting bridge {BRIDGE}")
        run(["ip", "link", "del", BRIDGE], what=f"deleting bridge {BRIDGE}")


def clear_dir(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
