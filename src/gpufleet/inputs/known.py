"""What the input boundary knows about the nodes: the directories, accounts, groups, zones,
environment keys and ports that belong to the OS or to other software, and the limits of
what gpufleet accepts. Data only; :mod:`gpufleet.inputs.rules` applies it."""

from __future__ import annotations

import re

#: A run id: a letter or digit, then letters, digits, ``.``, ``_`` or ``-`` (64 at most)
#: (gpufleet.verify.run_id makes and claims them).
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RUN_ID_RESERVED = frozenset({"latest", "local", "faults", "bench", "soak", "smoke-local"})
#: What a run id may be, as refusals say it.
RUN_ID_ALLOWED = (
    "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit, not one of "
    + ", ".join(sorted(RUN_ID_RESERVED))
)
#: Slurm names gpufleet passes on (partition, account, QOS, reservation, node, job): no
#: shell or hostlist syntax ("[", ",", spaces), so a value stays one name.
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SLURM_NAME_ALLOWED = (
    "a Slurm name: letters, digits, '.', '_', '-' (up to 64, not starting with . _ -)"
)
#: A GRES list (gres.conf names, sbatch --gres): gpu:8, gpu:h100:8, gpu:2,nic:1.
SLURM_GRES_RE = re.compile(r"[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*)*")
SLURM_GRES_ALLOWED = "a GRES list such as gpu:8 or gpu:h100:8"

MAX_VALUE_LEN = 1024
"""Longest single-line value accepted (URLs, names, paths)."""

SYSTEM_DIRS: frozenset[str] = frozenset(
    {
        "/", "/bin", "/boot", "/dev", "/dev/shm", "/etc", "/home", "/lib", "/lib64", "/media",
        "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr",
        "/usr/bin", "/usr/include", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local",
        "/usr/local/bin", "/usr/local/lib", "/usr/sbin", "/usr/share", "/var", "/var/lib",
        "/var/log", "/var/tmp", "/var/cache", "/var/spool",
    }
)  # fmt: skip
"""Directories gpufleet never takes over (chown/chmod/replace) as env prefix, state or
config directory. Children of the shared top-level trees that belong to the OS are refused
too (see :func:`gpufleet.inputs.rules.check_owned_dir`)."""

#: Direct children of these belong to the OS or to other software (/etc/ssh,
#: /usr/lib/systemd, /var/lib/rpm): never a gpufleet directory. /opt, /srv and /var/lib
#: children are fine (/opt/gpufleet, /var/lib/gpufleet).
NO_DIRECT_CHILDREN = (
    "/usr", "/usr/lib", "/usr/lib64", "/usr/share", "/boot", "/dev", "/proc", "/sys", "/run",
    "/tmp", "/var/tmp", "/dev/shm", "/root",
)  # fmt: skip

PRIVILEGED_GROUPS: frozenset[str] = frozenset(
    {
        "root", "wheel", "adm", "sudo", "admin", "disk", "kmem", "shadow", "sys", "bin",
        "daemon", "docker", "lxd", "libvirt", "video",
    }
)  # fmt: skip
"""Groups that give root or raw device access: never the env group."""

SYSTEM_ACCOUNTS: frozenset[str] = frozenset(
    {
        "root", "bin", "daemon", "adm", "lp", "sync", "shutdown", "halt", "mail", "operator",
        "games", "ftp", "nobody", "sshd", "dbus", "polkitd", "systemd-network", "chrony", "tss",
    }
)  # fmt: skip
"""Well-known system accounts refused as torch_env_owner even with use-as-is."""

NCCL_ENV_PREFIXES: tuple[str, ...] = (
    "NCCL_", "GLOO_", "TORCH_", "UCX_", "CUDA_", "NVIDIA_", "OMP_", "MASTER_",
)  # fmt: skip
"""Prefixes accepted for keys of cluster_network_nccl_extra_env."""

#: Keys that change what runs or where libraries come from, whatever their prefix.
ENV_DENY = re.compile(r"(LD_|PATH$|PYTHON|LIBRARY|PRELOAD|BASH_ENV|^ENV$|^IFS$)")

MAX_CIDR_HOSTS_V4 = 16
"""Narrowest IPv4 prefix accepted without opt-in is /16 (65,536 addresses)."""
MAX_CIDR_HOSTS_V6 = 48
"""Narrowest IPv6 prefix accepted without opt-in is /48."""

FOREIGN_ZONES: frozenset[str] = frozenset(
    {
        "block", "dmz", "drop", "external", "home", "internal", "public", "trusted", "work",
        "libvirt", "libvirt-routed", "docker", "nm-shared", "podman",
    }
)  # fmt: skip
"""firewalld zones shipped by firewalld, libvirt, Docker, NetworkManager and podman."""

PRIVILEGED_PORTS = 1024
"""Ports below this are the privileged range, where the nodes' system services listen (22
SSH, 53 DNS, 111 rpcbind, 123 NTP, ...): never a port gpufleet opens for torchrun or the
probe."""

SERVICE_PORTS: dict[int, str] = {
    22: "SSH (sshd, how Ansible reaches the nodes)",
    53: "DNS",
    111: "rpcbind (NFS)",
    123: "NTP",
    323: "chronyd",
    80: "HTTP",
    443: "HTTPS",
    2049: "NFS",
    5555: "DCGM's nv-hostengine",
    6817: "slurmctld",
    6818: "slurmd",
    6819: "slurmdbd",
    9100: "node_exporter",
    9400: "dcgm-exporter",
}
"""Ports of services that run on (or serve) the nodes of a GPU cluster; a port variable of
gpufleet never takes one (the rendezvous or probe listener would fail to bind, or a firewall
rule meant for torchrun would open the service)."""

MAX_ALLREDUCE_SIZE = 64 * 1024**3
"""Largest all-reduce size accepted in verify_sizes: 64 GiB. Every rank holds the buffer of
each size, and NCCL or gloo a working copy of it, in GPU memory (host memory in CPU mode):
64 GiB takes 128 GiB per rank, most of the memory of the largest GPUs (141-192 GB) and more
than any other holds, so a larger size (999999G is 976 TiB) can only fail, out of memory,
after the nodes were prepared."""
