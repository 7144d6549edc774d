"""The cached base root filesystem: Debian bookworm (debootstrap) prepared to boot systemd."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

from .config import CACHE_DIR, DEBIAN_MIRROR, DEBIAN_SUITE, ROOTFS_PACKAGES
from .sh import TestbedError, run, say

ROOTFS = CACHE_DIR / "rootfs"
STAMP = CACHE_DIR / "rootfs.stamp"
LOG = CACHE_DIR / "rootfs.log"
ROOTFS_VERSION = "6"  # bump when the customisation below changes

# Units that cannot work inside a node (no udev, read-only /sys, no consoles) or that would
# only add noise (timers). Masked so that `systemctl is-system-running` says "running".
MASKED_UNITS = (
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-kernel-config.mount",
    "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount",
    "dev-mqueue.mount",
    "systemd-remount-fs.service",
    "systemd-firstboot.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-modules-load.service",
    "systemd-sysctl.service",
    "console-getty.service",
    "getty@tty1.service",
    "getty.target",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "man-db.timer",
)


def wanted_stamp() -> str:
    h = hashlib.sha256(
        "\n".join([ROOTFS_VERSION, DEBIAN_SUITE, *ROOTFS_PACKAGES, *MASKED_UNITS]).encode()
    ).hexdigest()[:16]
    return f"{DEBIAN_SUITE} {h}"


def is_current() -> bool:
    return ROOTFS.is_dir() and STAMP.is_file() and STAMP.read_text().strip() == wanted_stamp()


def _chroot(root: Path, script: str, what: str) -> None:
    """Run a shell script in root with /proc, /sys, /dev mounted in a private mount namespace
    (the mounts vanish with the namespace, even if the script fails)."""
    wrapper = (
        "set -eu\n"
        f"R={root}\n"
        "mount --make-rprivate /\n"
        "mount -t proc proc $R/proc\n"
        "mount --rbind /sys $R/sys\n"
        "mount --rbind /dev $R/dev\n"
        'exec chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin '
        'DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 /bin/sh -euc "$1"\n'
    )
    run(
        ["unshare", "--mount", "--fork", "sh", "-c", wrapper, "chroot-step", script],
        what=what,
        log=LOG,
        fix=f"read {LOG}; a network problem reaching {DEBIAN_MIRROR} is the usual cause; "
        "rerun `make testbed-up`.",
    )


def build(force: bool = False) -> Path:
    """Build the base rootfs once; a current cache is reused."""
    if is_current() and not force:
        say(f"base rootfs: cached at {ROOTFS} ({STAMP.read_text().strip()})")
        return ROOTFS
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = CACHE_DIR / "rootfs.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    LOG.write_text("")
    t0 = time.monotonic()
    say(f"base rootfs: debootstrap {DEBIAN_SUITE} (minbase) into {tmp} (log: {LOG})")
    run(
        [
            "debootstrap",
            "--variant=minbase",
            "--include=ca-certificates",
            DEBIAN_SUITE,
            tmp,
            DEBIAN_MIRROR,
        ],
        what="debootstrap of the base rootfs",
        log=LOG,
        fix=f"read {LOG}; check that {DEBIAN_MIRROR} is reachable; rerun `make testbed-up`.",
    )
    say("base rootfs: installing dnf, rpm, systemd, openssh-server, firewalld, ... (apt-get)")
    shutil.copy("/etc/resolv.conf", tmp / "etc/resolv.conf")
    (tmp / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    (tmp / "usr/sbin/policy-rc.d").chmod(0o755)
    pkgs = " ".join([*ROOTFS_PACKAGES, "systemd-sysv", "libpam-systemd"])
    _chroot(tmp, f"apt-get install -y -q --no-install-recommends {pkgs}", "apt-get install")
    say("base rootfs: customising (no host keys, masked units, dnf defaults)")
    masks = " ".join(MASKED_UNITS)
    _chroot(
        tmp,
        "rm -f /etc/ssh/ssh_host_* /usr/sbin/policy-rc.d\n"
        "apt-get clean\n"
        "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin\n"
        f"systemctl mask {masks}\n"
        "systemctl enable ssh.service dbus.service firewalld.service\n"
        # Slurm and munge start only when the testbed is asked for Slurm (tbctl.slurm),
        # each testbed with its own munge key
        "systemctl disable munge.service slurmd.service slurmctld.service\n"
        "rm -f /etc/munge/munge.key\n"
        "systemctl set-default multi-user.target\n"
        ": > /etc/machine-id\n"
        "install -d -m 700 /root/.ssh\n"
        "install -d /etc/yum.repos.d /etc/dnf/vars\n"
        # Debian enables dnf's `local` plugin (EL does not ship it by default): it re-serves
        # every downloaded package from an unsigned `_dnf_local` repo, which breaks gpgcheck.
        "sed -i 's/^enabled *= *true/enabled = false/' /etc/dnf/plugins/local.conf\n",
        "customising the base rootfs",
    )
    (tmp / "etc/resolv.conf").write_text("# gpufleet testbed node: no DNS (air-gapped)\n")
    if ROOTFS.exists():
        shutil.rmtree(ROOTFS)
    tmp.rename(ROOTFS)
    STAMP.write_text(wanted_stamp() + "\n")
    say(f"base rootfs: built in {time.monotonic() - t0:.0f}s at {ROOTFS}")
    return ROOTFS


def check_python(root: Path) -> None:
    if not (root / "usr/bin/python3.11").exists():
        raise TestbedError(
            f"base rootfs {root} has no /usr/bin/python3.11; run `make testbed-clean`"
            " then `make testbed-up` to rebuild it"
        )
