"""A real Slurm on the simulated cluster (`make testbed-up SLURM=1`, `make demo LAUNCHER=slurm`).

The testbed plays the site: Slurm is the scheduler the site already runs, installed in the
base root filesystem from Debian's packages (slurmctld, slurmd, slurm-client, munge 22.05)
and started here, never by gpufleet's roles. slurmctld runs on node1, slurmd on every node,
one munge key for all, slurm.conf generated from the node list with CPUs as the resource
(no GPUs, no cgroups: proctrack/linuxproc, task/none). Each node's firewall opens Slurm's
ports as a site's would (slurmctld 6817, slurmd 6818, srun's SrunPortRange).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from .config import RUN_DIR, Node
from .nodes import init_pid, node_exec, write_file
from .sh import TestbedError, say, wait_for

SLURM_DIR = RUN_DIR / "slurm"
MUNGE_KEY = SLURM_DIR / "munge.key"
STATE_FILE = SLURM_DIR / "enabled"
PARTITION = "gpufleet"
CTLD_PORT = 6817
SLURMD_PORT = 6818
SRUN_PORTS = (60001, 60200)
#: slurm.conf's HealthCheck* lines are gpufleet's to add (role slurm_health, when asked):
#: the testbed leaves them out so that a demo shows the role doing it.
CONF_PATH = "/etc/slurm/slurm.conf"
#: munged runs in the foreground: the packaged unit is Type=forking with a PID file owned by
#: the munge user, which the node's systemd refuses ("PID file is not owned by root") as
#: it cannot tell that the PID is in the service's cgroup inside a node.
MUNGE_DROPIN = (
    "/etc/systemd/system/munge.service.d/gftb-foreground.conf",
    "[Service]\nType=simple\nPIDFile=\nExecStart=\n"
    "ExecStart=/usr/sbin/munged --foreground $OPTIONS\n",
)


def slurm_conf(nodes: list[Node], cpus: int) -> str:
    """slurm.conf for the testbed: controller on node1, every node with ``cpus`` CPUs."""
    ctl = nodes[0]
    lines = [
        "# Written by the gpufleet testbed (testbed/tbctl/slurm.py): the site's Slurm.",
        "ClusterName=gftb",
        f"SlurmctldHost={ctl.name}({ctl.address})",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CryptoType=crypto/munge",
        "MpiDefault=none",
        # no cgroups in the nodes: processes are tracked by their parent links
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        # a node that comes back after being down (slurmd restarted) is usable again
        "ReturnToService=2",
        f"SlurmctldPort={CTLD_PORT}",
        f"SlurmdPort={SLURMD_PORT}",
        f"SrunPortRange={SRUN_PORTS[0]}-{SRUN_PORTS[1]}",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        # a dead node is noticed within half a minute (the unschedulable-job test)
        "SlurmdTimeout=30",
        "SlurmctldTimeout=30",
        "InactiveLimit=0",
        "KillWait=10",
        "MinJobAge=300",
        "MessageTimeout=20",
    ]
    lines += [f"NodeName={n.name} NodeAddr={n.address} CPUs={cpus} State=UNKNOWN" for n in nodes]
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def firewall_argv() -> list[list[str]]:
    """The firewall-cmd calls that open Slurm's ports in a node (permanent, then reload)."""
    ports = [f"{CTLD_PORT}-{SLURMD_PORT}/tcp", f"{SRUN_PORTS[0]}-{SRUN_PORTS[1]}/tcp"]
    return [
        *(["firewall-cmd", "--permanent", f"--add-port={p}"] for p in ports),
        ["firewall-cmd", "--reload"],
    ]


def enabled() -> bool:
    return STATE_FILE.is_file()


def _munge_ids(root: Path) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == "munge":
            return int(f[2]), int(f[3])
    raise TestbedError("the base rootfs has no munge user; run `make testbed-clean` then up")


def up(nodes: list[Node]) -> None:
    """Start Slurm on the running nodes (idempotent): key, config, firewall, daemons."""
    t0 = time.monotonic()
    SLURM_DIR.mkdir(parents=True, exist_ok=True)
    if not MUNGE_KEY.exists():
        say("slurm: generating the munge key (one for all nodes)")
        MUNGE_KEY.write_bytes(os.urandom(1024))
        MUNGE_KEY.chmod(0o400)
    cpus = os.cpu_count() or 1
    conf = slurm_conf(nodes, cpus).encode()
    for n in nodes:
        pid = init_pid(n)
        if pid is None:
            raise TestbedError(f"{n.name} is not running; run `make testbed-up`")
        root = Path(f"/proc/{pid}/root")
        uid, gid = _munge_ids(root)
        write_file(n, "/etc/munge/munge.key", MUNGE_KEY.read_bytes(), 0o400, (uid, gid))
        old = (
            (root / CONF_PATH.lstrip("/")).read_bytes()
            if (root / CONF_PATH.lstrip("/")).exists()
            else b""
        )
        # keep gpufleet's HealthCheck* lines (role slurm_health) when the file is rewritten
        kept = b"".join(
            line + b"\n" for line in old.splitlines() if line.startswith(b"HealthCheck")
        )
        write_file(n, CONF_PATH, conf + kept, 0o644)
        write_file(n, MUNGE_DROPIN[0], MUNGE_DROPIN[1].encode(), 0o644)
        node_exec(n, ["systemctl", "daemon-reload"], timeout=60)
        for argv in firewall_argv():
            node_exec(n, argv, check=True)
        units = ["munge", "slurmd"] + (["slurmctld"] if n == nodes[0] else [])
        node_exec(n, ["systemctl", "enable", "--now", *units], timeout=90)
        if old and old != conf + kept:
            node_exec(n, ["systemctl", "restart", *units[1:]], timeout=90)
    ctl = nodes[0]
    names = ",".join(n.name for n in nodes)

    def all_idle() -> bool:
        r = node_exec(ctl, ["sinfo", "-h", "-N", "-n", names, "-o", "%N %t"], check=False)
        states = dict(line.split()[:2] for line in r.stdout.splitlines() if len(line.split()) >= 2)
        return len(states) == len(nodes) and all(
            s.rstrip("*~#!%$@^-") in ("idle", "mix", "alloc", "drain", "drng")
            for s in states.values()
        )

    if not wait_for(all_idle, 60, 1.0):
        r = node_exec(ctl, ["sinfo", "-N", "-l"], check=False)
        log = node_exec(ctl, ["tail", "-n", "20", "/var/log/slurm/slurmctld.log"], check=False)
        raise TestbedError(
            f"slurm: the nodes did not come up in 60 s:\n{r.stdout}\n{log.stdout}\n"
            "--- what to do: read /var/log/slurm/slurmd.log in the nodes (testbed/node nodeN)"
        )
    STATE_FILE.write_text(names + "\n")
    say(f"slurm: slurmctld on {ctl.name}, slurmd on {names}: up in {time.monotonic() - t0:.0f}s")
