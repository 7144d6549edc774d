"""The input boundary: one set of validators for values that end up in files on the nodes.

gpufleet runs as root on every node, so every inventory value that is rendered into a file
(``.condarc``, ``pip.conf``, ``.repo``, the firewalld zone XML, ``nccl.env``, profile
scripts) or used as a path, an account or a firewall source passes through here first
(docs/security.md). Each check raises :class:`BoundaryError` whose message names the
variable, the value (``repr``, so control characters are visible) and what is allowed.

The Ansible side is a thin adapter (``gpufleet.core.input_problems`` and the
``gpufleet.core.single_line`` test); the check play runs it for every node before any change.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.planning import compat, gpuarch, versions
from gpufleet.units import parse_sizes

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

# Anything below U+0020, DEL, the C1 block and the Unicode line/paragraph separators: each
# can end a line in one of the formats rendered (YAML, INI, XML, shell) or hide text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u0085]")

SYSTEM_DIRS: frozenset[str] = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/dev/shm",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/include",
        "/usr/lib",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/lib",
        "/usr/sbin",
        "/usr/share",
        "/var",
        "/var/lib",
        "/var/log",
        "/var/tmp",
        "/var/cache",
        "/var/spool",
    }
)
"""Directories gpufleet never takes over (chown/chmod/replace) as env prefix, state or
config directory. Children of the shared top-level trees that belong to the OS are refused
too (see :func:`check_owned_dir`)."""

# Direct children of these belong to the OS or to other software (/etc/ssh, /usr/lib/systemd,
# /var/lib/rpm): never a gpufleet directory. /opt, /srv and /var/lib children are fine
# (/opt/gpufleet, /var/lib/gpufleet).
_NO_DIRECT_CHILDREN = (
    "/usr",
    "/usr/lib",
    "/usr/lib64",
    "/usr/share",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/tmp",
    "/var/tmp",
    "/dev/shm",
    "/root",
)

PRIVILEGED_GROUPS: frozenset[str] = frozenset(
    {
        "root",
        "wheel",
        "adm",
        "sudo",
        "admin",
        "disk",
        "kmem",
        "shadow",
        "sys",
        "bin",
        "daemon",
        "docker",
        "lxd",
        "libvirt",
        "video",
    }
)
"""Groups that give root or raw device access: never the env group."""

SYSTEM_ACCOUNTS: frozenset[str] = frozenset(
    {
        "root",
        "bin",
        "daemon",
        "adm",
        "lp",
        "sync",
        "shutdown",
        "halt",
        "mail",
        "operator",
        "games",
        "ftp",
        "nobody",
        "sshd",
        "dbus",
        "polkitd",
        "systemd-network",
        "chrony",
        "tss",
    }
)
"""Well-known system accounts refused as torch_env_owner even with use-as-is."""

NCCL_ENV_PREFIXES: tuple[str, ...] = (
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "UCX_",
    "CUDA_",
    "NVIDIA_",
    "OMP_",
    "MASTER_",
)
"""Prefixes accepted for keys of cluster_network_nccl_extra_env."""

# Keys that change what runs or where libraries come from, whatever their prefix.
_ENV_DENY = re.compile(r"(LD_|PATH$|PYTHON|LIBRARY|PRELOAD|BASH_ENV|^ENV$|^IFS$)")

MAX_CIDR_HOSTS_V4 = 16
"""Narrowest IPv4 prefix accepted without opt-in is /16 (65,536 addresses)."""
MAX_CIDR_HOSTS_V6 = 48
"""Narrowest IPv6 prefix accepted without opt-in is /48."""

FOREIGN_ZONES: frozenset[str] = frozenset(
    {
        "block",
        "dmz",
        "drop",
        "external",
        "home",
        "internal",
        "public",
        "trusted",
        "work",
        "libvirt",
        "libvirt-routed",
        "docker",
        "nm-shared",
        "podman",
    }
)
"""firewalld zones shipped by firewalld, libvirt, Docker, NetworkManager and podman."""

# name[extras] (op version)? or a NEVRA-like name-version-release.arch: letters, digits and
# . _ + - ~ ^ : * only; no leading dash, so no option ever passes.
_PACKAGE_SPEC = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9._+-]*(\[[A-Za-z0-9._,-]+\])?"
    r"((==|>=|<=|~=|!=|>|<|=|-)[A-Za-z0-9.*+!_:~^-]+)?"
    r"(\s*,\s*(==|>=|<=|~=|!=|>|<)[A-Za-z0-9.*+!_-]+)*"
)
_GPG_FINGERPRINT = re.compile(r"(?:[0-9A-F]{40}|[0-9A-F]{64})")
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_ZONE = re.compile(r"[A-Za-z0-9_-]{1,17}")
_CHANNEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*|https://[^\s\"'#]+")


class BoundaryError(RefusedError, ValueError):
    """A value refused at the input boundary (exit 2)."""


_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]*@")


def _show(value: object) -> str:
    """``value`` as messages quote it: credentials in a URL (``user:token@``) masked, since
    refusals are printed and logged."""
    text = _USERINFO.sub(r"\1***@", repr(value))
    return text if len(text) <= 120 else text[:117] + "..."


def refuse(name: str, value: object, allowed: str) -> BoundaryError:
    return BoundaryError(f"{name}={_show(value)} is refused -> allowed: {allowed}")


def single_line(
    value: object,
    name: str,
    max_len: int = MAX_VALUE_LEN,
    pattern: str | None = None,
    allowed: str = "",
) -> str:
    """``value`` as a string of one line: no control characters, at most ``max_len``
    characters, and matching ``pattern`` in full (``re.fullmatch``) when given."""
    what = allowed or f"one line of at most {max_len} printable characters"
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise refuse(name, value, what)
    text = str(value)
    if not text or len(text) > max_len or _CONTROL.search(text):
        raise refuse(name, value, what)
    if pattern is not None and re.fullmatch(pattern, text) is None:
        raise refuse(name, value, what)
    return text


def is_single_line(value: object, max_len: int = MAX_VALUE_LEN) -> bool:
    try:
        single_line(value, "value", max_len)
    except BoundaryError:
        return False
    return True


def bound(x: float) -> str:
    """A range bound as messages and argument specs write it (1000000, not 1e+06)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def number(value: object, name: str, lo: float, hi: float, integer: bool = True) -> float:
    """A finite number in [lo, hi] (no nan/inf, no bool)."""
    kind = "an integer" if integer else "a number"
    allowed = f"{kind} {bound(lo)}-{bound(hi)}"
    if isinstance(value, bool):
        raise refuse(name, value, allowed)
    try:
        num = float(str(value).strip()) if isinstance(value, str) else float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise refuse(name, value, allowed) from None
    if not math.isfinite(num) or not lo <= num <= hi or (integer and num != int(num)):
        raise refuse(name, value, allowed)
    return num


RANGES: dict[str, tuple[float, float, str]] = {
    "gpufleet_rdzv_port": (1, 65535, "TCP port"),
    "gpufleet_gpus_expected": (0, 64, "0 = not pinned"),
    # name: (lowest, highest, what it counts). Integers unless listed in _REAL_RANGES.
    "python_bootstrap_timeout": (1, 3600, "seconds a raw dnf install may take"),
    "preflight_env_free_mb": (0, 10_000_000, "MiB; 0 disables the check"),
    "preflight_toolkit_free_mb": (0, 10_000_000, "MiB; 0 disables the check"),
    "preflight_repoquery_timeout": (1, 3600, "seconds"),
    "nvidia_driver_install_retries": (1, 100, "tries per transaction"),
    "nvidia_driver_install_delay": (0, 3600, "seconds between tries"),
    "nvidia_driver_reboot_timeout": (60, 86400, "seconds"),
    "nvidia_driver_smi_timeout": (1, 3600, "seconds"),
    "cuda_toolkit_install_retries": (1, 100, "tries per transaction"),
    "cuda_toolkit_install_delay": (0, 3600, "seconds between tries"),
    "infiniband_install_retries": (1, 100, "tries per transaction"),
    "infiniband_install_delay": (0, 3600, "seconds between tries"),
    "dcgm_install_retries": (1, 100, "tries per transaction"),
    "dcgm_install_delay": (0, 3600, "seconds between tries"),
    "dcgm_major": (3, 4, "DCGM major version"),
    "torch_env_pip_timeout": (1, 3600, "seconds"),
    "torch_env_pip_retries": (0, 100, "retries of one pip connection"),
    "torch_env_install_timeout": (1, 86400, "seconds"),
    "torch_env_conda_timeout": (1, 3600, "seconds"),
    "torch_env_download_timeout": (1, 86400, "seconds"),
    "cluster_network_rdzv_port": (1, 65535, "TCP port"),
    "cluster_network_ib_gid_index": (-1, 255, "-1 = not set"),
    "verify_gpus_per_node": (0, 64, "0 = one rank per visible GPU"),
    "verify_cpu_nproc": (1, 256, "ranks per node in CPU mode"),
    "verify_warmup": (0, 10000, "untimed iterations per size"),
    "verify_iters": (1, 100000, "timed iterations per size"),
    "verify_busbw_min": (0, 1e6, "GB/s; 0 = the expected-busbw table"),
    "verify_collective_timeout": (1, 86400, "seconds"),
    "verify_rdzv_timeout": (1, 86400, "seconds"),
    "verify_launch_timeout": (1, 86400, "seconds"),
    "verify_checks_timeout": (1, 86400, "seconds"),
    "verify_smoke_timeout": (1, 86400, "seconds"),
    "verify_probe_timeout": (1, 3600, "seconds per connect try"),
    "verify_probe_retries": (1, 1000, "tries per target"),
    "verify_probe_listen_s": (1, 86400, "seconds"),
    "verify_probe_port": (1, 65535, "TCP port"),
    "verify_train_epochs": (1, 1000, "epochs of the training step"),
    "verify_train_per_rank": (1, 1_000_000, "samples per rank and epoch"),
    "verify_train_batch": (1, 65536, "samples per rank and step"),
    "verify_script_timeout": (1, 604800, "seconds"),
    "verify_lock_wait": (0, 86400, "seconds to wait for another run's node lock"),
    "verify_lock_stale_s": (60, 604800, "seconds after which a node lock is stale"),
    "verify_dcgm_level": (1, 4, "dcgmi diag -r level"),
    "verify_dcgm_timeout": (1, 86400, "seconds"),
    "verify_slurm_start_timeout": (1, 86400, "seconds a Slurm job may stay pending"),
    "slurm_health_timeout": (1, 55, "seconds; slurmd kills a HealthCheckProgram after 60"),
    "slurm_health_interval": (5, 86400, "seconds between health-check runs"),
}
"""Every number a role takes, with its bounds: the one range table (argument specs say
``type: int``; these say how much)."""

_REAL_RANGES = frozenset({"verify_busbw_min"})


def _ranges(values: Mapping[str, Any], prefix: str, problems: list[str]) -> None:
    """The RANGES rows of one role (names starting with ``prefix``) present in ``values``."""
    for key, (lo, hi, what) in RANGES.items():
        if key.startswith(prefix) and key in values:
            integer = key not in _REAL_RANGES
            try:
                number(values[key], key, lo, hi, integer=integer)
            except BoundaryError as exc:
                problems.append(f"{exc} ({what})")


def _norm_path(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


def check_owned_dir(path: object, name: str) -> str:
    """An absolute path gpufleet may create and own: not a system directory, no '..'."""
    allowed = (
        "an absolute path that gpufleet creates and owns, at least two levels deep, "
        "e.g. /opt/gpufleet/env (system directories such as /usr, /etc, /tmp, /var/lib and "
        "their OS-owned children are refused, docs/security.md)"
    )
    text = single_line(path, name, 4096, allowed=allowed)
    if not text.startswith("/") or re.search(r"(^|/)\.\.(/|$)", text):
        raise refuse(name, path, allowed)
    norm = _norm_path(text)
    parent = norm.rsplit("/", 1)[0] or "/"
    if (
        norm in SYSTEM_DIRS
        or norm.count("/") < 2
        or parent in _NO_DIRECT_CHILDREN
        or (parent == "/etc" and norm != "/etc/gpufleet")
    ):
        raise refuse(name, path, allowed)
    return norm


def check_account(name_value: object, name: str) -> str:
    return single_line(
        name_value,
        name,
        32,
        _ACCOUNT.pattern,
        "a POSIX user/group name: a-z 0-9 _ -, starting with a letter or _, "
        "at most 32 characters (e.g. gpufleet)",
    )


def check_group(value: object, name: str, owner: str = "") -> str:
    """The env group: never a privileged group (root only together with owner root, which
    the role uses as it is)."""
    group = check_account(value, name)
    if group in PRIVILEGED_GROUPS and not (group == "root" and owner == "root"):
        raise refuse(
            name,
            value,
            f"a group without privileges (not {', '.join(sorted(PRIVILEGED_GROUPS))}), "
            "e.g. gpufleet",
        )
    return group


def check_owner(value: object, name: str, existing: bool, use_as_is: bool) -> str:
    """The env owner: an account gpufleet creates, or (use_as_is, i.e.
    torch_env_create_owner: false) an existing one used as it is, never modified."""
    owner = check_account(value, name)
    if owner == "root":  # the role never creates or modifies root (tasks/main.yml)
        return owner
    if not use_as_is and owner in SYSTEM_ACCOUNTS:
        raise refuse(
            name,
            value,
            "an account gpufleet creates (e.g. gpufleet); system accounts are never modified "
            "(set torch_env_create_owner: false to use an existing account as it is)",
        )
    if existing and not use_as_is:
        raise refuse(
            name,
            value,
            "a new account, or set torch_env_create_owner: false to use an existing account "
            "as it is (never modified)",
        )
    return owner


def check_package_spec(value: object, name: str) -> str:
    return single_line(
        value,
        name,
        256,
        _PACKAGE_SPEC.pattern,
        "a package spec: name, name==version, name>=version or name-version-release.arch "
        "(no options, no URLs)",
    )


def check_package_name(value: object, name: str) -> str:
    """A bare package name (the role appends ``-VERSION`` or ``-BRANCH.*`` itself)."""
    return single_line(
        value,
        name,
        128,
        r"[A-Za-z0-9][A-Za-z0-9._+-]*",
        "a package name of A-Z a-z 0-9 . _ + - (no version, no options, no URLs)",
    )


def check_env_key(key: object, name: str) -> str:
    prefixes = ", ".join(NCCL_ENV_PREFIXES)
    allowed = f"a key starting with {prefixes} (A-Z 0-9 _), not a loader/path variable"
    text = single_line(key, name, 128, r"[A-Z][A-Z0-9_]*", allowed)
    if not text.startswith(NCCL_ENV_PREFIXES) or _ENV_DENY.search(
        text.split("_", 1)[1] if "_" in text else text
    ):
        raise refuse(name, key, allowed)
    return text


def check_env_value(value: object, name: str) -> str:
    if isinstance(value, bool):
        value = int(value)
    return single_line(
        value,
        name,
        512,
        r"[A-Za-z0-9_.,:=/+@%-]*",
        "one word of A-Z a-z 0-9 _ . , : = / + @ % - (no spaces, quotes or $)",
    )


def check_fingerprint(value: object, name: str) -> str:
    text = single_line(
        value, name, 80, allowed="40 or 64 hexadecimal digits (spaces allowed between groups)"
    )
    compact = text.replace(" ", "").upper()
    if not _GPG_FINGERPRINT.fullmatch(compact):
        raise refuse(name, value, "40 or 64 hexadecimal digits (spaces allowed between groups)")
    return compact


def check_network(value: object, name: str, allow_wide: bool, opt_in: str) -> str:
    text = single_line(value, name, 64, allowed="an address or ADDRESS/PREFIX")
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise refuse(name, value, "an address or ADDRESS/PREFIX, e.g. 10.0.0.0/24") from None
    limit = MAX_CIDR_HOSTS_V4 if net.version == 4 else MAX_CIDR_HOSTS_V6
    if net.prefixlen < limit and not allow_wide:
        raise refuse(
            name,
            value,
            f"a prefix of /{limit} or narrower: /{net.prefixlen} opens the cluster ports "
            f"(every port with restrict_ports false) to {net.num_addresses} addresses; "
            f"set {opt_in}: true to accept that",
        )
    return text


def check_zone(value: object, name: str) -> str:
    zone = single_line(
        value,
        name,
        17,
        _ZONE.pattern,
        "a firewalld zone name of A-Z a-z 0-9 _ - (at most 17 characters) that gpufleet "
        "owns, e.g. gpufleet",
    )
    if zone.lower() in FOREIGN_ZONES:
        raise refuse(
            name,
            value,
            "a zone of gpufleet's own, not one of firewalld/libvirt/docker: "
            + ", ".join(sorted(FOREIGN_ZONES)),
        )
    return zone


def check_url(
    value: object,
    name: str,
    trusted_hosts: Iterable[str] = (),
    allow_path: bool = False,
    signed: bool = False,
) -> str:
    """A URL on one line. ``signed``: what it serves is checked against a pinned GPG key
    (dnf repositories with gpgcheck, keys with their fingerprint), so plain http is allowed;
    otherwise http only for a host in ``trusted_hosts``."""
    if signed:
        allowed = (
            "an http(s):// URL (its packages are checked against the pinned GPG key) "
            "or a file:/// URL"
        )
    else:
        allowed = (
            "an https:// URL (http:// only with its host in the trusted hosts), a file:/// URL"
            + (" or an absolute path" if allow_path else "")
        )
    text = single_line(value, name, MAX_VALUE_LEN, r"[^\s\"'<>\\`]+", allowed)
    if allow_path and text.startswith("/"):
        return text
    m = re.fullmatch(
        r"(https?|file)://([^/@]*@)?([A-Za-z0-9.\-]*|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[^\s]*)?",
        text,
    )
    if m is None or (m.group(1) != "file" and not m.group(3)):
        raise refuse(name, value, allowed)
    if m.group(1) == "file" and (
        m.group(4)
        or m.group(2)
        or m.group(3) not in ("", "localhost")
        or not (m.group(5) or "").startswith("/")
    ):
        raise refuse(name, value, allowed)
    if m.group(1) == "http" and not signed and m.group(3) not in set(trusted_hosts):
        raise refuse(name, value, allowed)
    return text


def check_channel(value: object, name: str) -> str:
    return single_line(
        value,
        name,
        MAX_VALUE_LEN,
        _CHANNEL.pattern,
        "a conda channel name (e.g. conda-forge) or an https:// URL",
    )


# --------------------------------------------------------------------------- role checks

Check = Callable[[Mapping[str, Any], list[str]], None]


def _each(
    values: Mapping[str, Any], key: str, func: Callable[[object, str], object], problems: list[str]
) -> None:
    items = values.get(key)
    if items is None:
        return
    if isinstance(items, (Mapping, str)) or not isinstance(items, Iterable):
        problems.append(str(refuse(key, items, "a list")))
        return
    for i, item in enumerate(items):
        try:
            func(item, f"{key}[{i}]")
        except BoundaryError as exc:
            problems.append(str(exc))


def _one(
    values: Mapping[str, Any],
    key: str,
    func: Callable[[object, str], object],
    problems: list[str],
    skip_empty: bool = False,
) -> None:
    if key not in values or (skip_empty and values[key] in ("", None)):
        return
    try:
        func(values[key], key)
    except BoundaryError as exc:
        problems.append(str(exc))


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on", "y", "t"}


def torch_env_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    for key in (
        "torch_env_prefix",
        "torch_env_state_dir",
        "torch_env_config_dir",
        "torch_env_conda_root",
    ):
        _one(v, key, check_owned_dir, problems)
    as_is = "torch_env_create_owner" in v and not _truthy(v["torch_env_create_owner"])
    _one(v, "torch_env_owner", lambda x, n: check_owner(x, n, False, as_is), problems)
    owner = str(v.get("torch_env_owner", ""))
    _one(v, "torch_env_group", lambda x, n: check_group(x, n, owner), problems)
    trusted = [str(h) for h in v.get("torch_env_pip_trusted_hosts") or [] if isinstance(h, str)]
    _each(
        v,
        "torch_env_pip_trusted_hosts",
        lambda x, n: single_line(
            x,
            n,
            255,
            r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?",
            "a host name or address (optional :port)",
        ),
        problems,
    )
    for key in (
        "torch_env_pip_index_url",
        "torch_env_pypi_index_url",
        "torch_env_pytorch_index_root",
        "torch_env_miniforge_base_url",
        "torch_env_miniforge_url",
        "torch_env_conda_channel_alias",
    ):
        _one(v, key, lambda x, n: check_url(x, n, trusted), problems, skip_empty=True)
    _each(v, "torch_env_pip_extra_index_urls", lambda x, n: check_url(x, n, trusted), problems)
    _each(
        v,
        "torch_env_pip_find_links",
        lambda x, n: check_url(x, n, trusted, allow_path=True),
        problems,
    )
    _each(v, "torch_env_conda_channels", check_channel, problems)
    custom = v.get("torch_env_conda_custom_channels")
    if isinstance(custom, Mapping):
        for cname, url in custom.items():
            try:
                single_line(
                    cname,
                    "torch_env_conda_custom_channels key",
                    128,
                    r"[A-Za-z0-9][A-Za-z0-9._-]*",
                    "a channel name of A-Z a-z 0-9 . _ -",
                )
                check_url(url, f"torch_env_conda_custom_channels[{cname!r}]", trusted)
            except BoundaryError as exc:
                problems.append(str(exc))
    _each(v, "torch_env_packages", check_package_spec, problems)
    _each(v, "torch_env_extra_packages", check_package_spec, problems)
    if v.get("torch_env_miniforge_url") and not v.get("torch_env_miniforge_sha256"):
        problems.append(
            str(
                refuse(
                    "torch_env_miniforge_url",
                    v.get("torch_env_miniforge_url"),
                    "a Miniforge URL together with torch_env_miniforge_sha256 "
                    "(its SHA-256, 64 hex digits)",
                )
            )
        )
    _one(
        v,
        "torch_env_miniforge_sha256",
        lambda x, n: single_line(x, n, 64, r"[0-9a-fA-F]{64}", "64 hexadecimal digits"),
        problems,
        skip_empty=True,
    )
    _ranges(v, "torch_env_", problems)
    _one(
        v,
        "torch_env_python_version",
        lambda x, n: single_line(x, n, 5, r"3\.[0-9]{1,2}", "3.X, e.g. 3.11"),
        problems,
    )
    _one(v, "torch_env_python", check_abs_path, problems, skip_empty=True)
    prefix, root = v.get("torch_env_prefix"), v.get("torch_env_conda_root")
    if (
        v.get("torch_env_manager") == "conda"
        and isinstance(prefix, str)
        and isinstance(root, str)
        and _norm_path(prefix) == _norm_path(root)
    ):
        problems.append(
            str(
                refuse(
                    "torch_env_prefix",
                    prefix,
                    "a directory other than torch_env_conda_root (the conda base itself)",
                )
            )
        )
    return problems


def _port_range_problems(v: Mapping[str, Any], problems: list[str]) -> None:
    """cluster_network_port_range LOW-HIGH with 1024 <= LOW < HIGH <= 65535; with
    restrict_ports the rendezvous port outside it (another process may hold it)."""
    text = v.get("cluster_network_port_range")
    if not isinstance(text, str) or re.fullmatch(r"[0-9]{1,5}-[0-9]{1,5}", text) is None:
        return  # the single-line check above names it
    low, high = (int(x) for x in text.split("-"))
    if not 1024 <= low < high <= 65535:
        problems.append(
            str(
                refuse(
                    "cluster_network_port_range",
                    text,
                    "LOW-HIGH with 1024 <= LOW < HIGH <= 65535, e.g. 32768-60999",
                )
            )
        )
        return
    port = v.get("cluster_network_rdzv_port")
    if (
        _truthy(v.get("cluster_network_restrict_ports", False))
        and isinstance(port, int)
        and low <= port <= high
    ):
        problems.append(
            str(
                refuse(
                    "cluster_network_rdzv_port",
                    port,
                    f"a port outside cluster_network_port_range {text} (another process may "
                    "hold a port of the ephemeral range when torchrun starts)",
                )
            )
        )


def cluster_network_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    wide = _truthy(v.get("cluster_network_allow_wide_sources", False))
    opt_in = "cluster_network_allow_wide_sources"
    _one(v, "cluster_network_cidr", lambda x, n: check_network(x, n, wide, opt_in), problems)
    _each(
        v, "cluster_network_extra_sources", lambda x, n: check_network(x, n, wide, opt_in), problems
    )
    if v.get("cluster_network_firewall", "firewalld") == "firewalld":
        _one(v, "cluster_network_zone", check_zone, problems)
    _one(v, "cluster_network_config_dir", check_owned_dir, problems)
    _one(
        v,
        "cluster_network_interface",
        lambda x, n: single_line(
            x,
            n,
            15,
            r"[A-Za-z0-9_.:@-]+",
            "an interface name (at most 15 characters of A-Z a-z 0-9 _ . : @ -)",
        ),
        problems,
        skip_empty=True,
    )
    _one(
        v,
        "cluster_network_port_range",
        lambda x, n: single_line(
            x, n, 11, r"[0-9]{1,5}-[0-9]{1,5}", "FIRST-LAST, e.g. 32768-60999"
        ),
        problems,
    )
    _one(
        v,
        "cluster_network_nccl_debug",
        lambda x, n: single_line(
            x, n, 16, r"VERSION|WARN|INFO|TRACE|ABORT", "VERSION, WARN, INFO, TRACE or ABORT"
        ),
        problems,
        skip_empty=True,
    )
    _each(
        v,
        "cluster_network_ib_hca",
        lambda x, n: single_line(
            x, n, 64, r"\^?=?[A-Za-z0-9_]+(:[0-9]+)?", "an HCA name such as mlx5_0 or mlx5_0:1"
        ),
        problems,
    )
    _ranges(v, "cluster_network_", problems)
    _port_range_problems(v, problems)
    if _truthy(v.get("cluster_network_ib_enable", False)) and not v.get("cluster_network_ib_hca"):
        problems.append(
            str(
                refuse(
                    "cluster_network_ib_hca",
                    v.get("cluster_network_ib_hca"),
                    "a list of HCA names such as [mlx5_0, mlx5_1:1] when "
                    "cluster_network_ib_enable is true",
                )
            )
        )
    _one(v, "cluster_network_ib_sysfs_root", check_read_path, problems)
    extra = v.get("cluster_network_nccl_extra_env")
    if isinstance(extra, Mapping):
        for key, val in extra.items():
            try:
                check_env_key(key, "cluster_network_nccl_extra_env key")
                check_env_value(val, f"cluster_network_nccl_extra_env[{key!r}]")
            except BoundaryError as exc:
                problems.append(str(exc))
    elif extra is not None:
        problems.append(
            str(refuse("cluster_network_nccl_extra_env", extra, "a mapping KEY: value"))
        )
    return problems


def _repo_problems(v: Mapping[str, Any], repo: str, problems: list[str]) -> None:
    """``<repo>_baseurl``, ``<repo>_gpgkey_url`` and ``<repo>_gpgkey_fingerprint`` of a
    signed dnf repository: URLs, the fingerprint, and never a key without its pin."""
    base = f"{repo}_baseurl"
    key_url = f"{repo}_gpgkey_url"
    finger = f"{repo}_gpgkey_fingerprint"
    _one(v, base, lambda x, n: check_url(x, n, signed=True), problems, skip_empty=True)
    _one(v, key_url, lambda x, n: check_url(x, n, signed=True), problems, skip_empty=True)
    _one(v, finger, check_fingerprint, problems, skip_empty=True)
    if str(v.get(key_url) or "").strip() and not str(v.get(finger) or "").strip():
        problems.append(
            str(
                refuse(
                    key_url,
                    v.get(key_url),
                    f"a key URL together with {finger} (the key's full fingerprint): "
                    "keys are never imported unpinned",
                )
            )
        )


def nvidia_driver_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _one(v, "nvidia_driver_branch", check_driver_branch, problems, skip_empty=True)
    for repo in ("cuda_repo", "epel", "base_repo"):
        _repo_problems(v, f"nvidia_driver_{repo}", problems)
    _each(v, "nvidia_driver_packages", check_package_spec, problems)
    _each(v, "nvidia_driver_kernel_packages", check_package_spec, problems)
    _each(v, "nvidia_driver_fabricmanager_packages", check_package_name, problems)
    _each(v, "nvidia_driver_nvlsm_packages", check_package_name, problems)
    _one(
        v,
        "nvidia_driver_crb_repo",
        lambda x, n: single_line(
            x, n, 64, r"[A-Za-z0-9._:-]+", "a repository id of A-Z a-z 0-9 . _ : -"
        ),
        problems,
        skip_empty=True,
    )
    _ranges(v, "nvidia_driver_", problems)
    return problems


def infiniband_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    base = "infiniband_doca_repo_baseurl"
    key_url = "infiniband_doca_repo_gpgkey_url"
    finger = "infiniband_doca_repo_gpgkey_fingerprint"
    _repo_problems(v, "infiniband_doca_repo", problems)
    if str(v.get(base) or "").strip() and not v.get("infiniband_doca_packages"):
        problems.append(
            str(
                refuse(
                    "infiniband_doca_packages",
                    v.get("infiniband_doca_packages"),
                    f"the packages to install from {base} (a list of package specs): "
                    "the role names no DOCA-OFED package itself",
                )
            )
        )
    if str(v.get(base) or "").strip() and not str(v.get(key_url) or "").strip():
        problems.append(
            str(
                refuse(
                    key_url,
                    v.get(key_url),
                    f"the signing key of {base} together with {finger}: gpgcheck needs the "
                    "mirror's key",
                )
            )
        )
    _each(v, "infiniband_packages", check_package_spec, problems)
    _each(v, "infiniband_doca_packages", check_package_spec, problems)
    _one(v, "infiniband_sysfs_root", check_read_path, problems)
    _ranges(v, "infiniband_", problems)
    return problems


def check_read_path(value: object, name: str) -> str:
    """An absolute path gpufleet only reads (sysfs roots): one line, no '..'."""
    allowed = "an absolute path without '..', e.g. /sys/class/infiniband"
    text = single_line(value, name, 4096, allowed=allowed)
    if not text.startswith("/") or re.search(r"(^|/)\.\.(/|$)", text):
        raise refuse(name, value, allowed)
    return text


def dcgm_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _each(v, "dcgm_packages", check_package_spec, problems)
    _ranges(v, "dcgm_", problems)
    return problems


def cuda_toolkit_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _each(v, "cuda_toolkit_extra_packages", check_package_spec, problems)
    _ranges(v, "cuda_toolkit_", problems)
    return problems


def verify_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _ranges(v, "verify_", problems)
    sizes = v.get("verify_sizes")
    if sizes not in (None, ""):
        try:
            parse_sizes(single_line(sizes, "verify_sizes", 512))
        except RefusedError:
            problems.append(
                str(
                    refuse(
                        "verify_sizes",
                        sizes,
                        "a comma list of sizes > 0 in bytes or with K, M, G, e.g. "
                        '"4K,64K,1M,8M" ("" = per-mode defaults)',
                    )
                )
            )
    _one(v, "verify_run_id", check_run_id, problems, skip_empty=True)
    for key in ("verify_work_dir", "verify_suites_dir"):
        _one(v, key, check_owned_dir, problems)
    for key in (
        "verify_slurm_partition",
        "verify_slurm_account",
        "verify_slurm_qos",
        "verify_slurm_reservation",
        "gpufleet_slurm_node_name",
    ):
        _one(v, key, check_slurm_name, problems, skip_empty=True)
    _one(v, "verify_slurm_gres", check_slurm_gres, problems, skip_empty=True)
    _one(v, "verify_slurm_submit_host", check_host_name, problems, skip_empty=True)
    return problems


def check_slurm_name(value: object, name: str) -> str:
    """A Slurm partition, account, QOS, reservation or node name (gpufleet.verify.launchers.slurm's
    rule)."""
    return single_line(value, name, 64, SLURM_NAME_RE.pattern, SLURM_NAME_ALLOWED)


def check_slurm_gres(value: object, name: str) -> str:
    """``auto`` or a GRES list (sbatch --gres)."""
    allowed = f'auto, "" (none) or {SLURM_GRES_ALLOWED}'
    text = single_line(value, name, 128, allowed=allowed)
    if text != "auto" and SLURM_GRES_RE.fullmatch(text) is None:
        raise refuse(name, value, allowed)
    return text


def check_run_id(value: object, name: str) -> str:
    """A run id (gpufleet.verify.run_id's rule: its pattern, ``latest`` reserved)."""
    allowed = RUN_ID_ALLOWED
    text = single_line(value, name, 64, RUN_ID_PATTERN.pattern, allowed)
    if text.lower() in RUN_ID_RESERVED:
        raise refuse(name, value, allowed)
    return text


def check_host_name(value: object, name: str) -> str:
    """An inventory host name that becomes a report path component."""
    return single_line(
        value,
        name,
        253,
        r"[A-Za-z0-9_][A-Za-z0-9._:-]*",
        "a host name of A-Z a-z 0-9 . _ : - (no '/', not starting with '.')",
    )


DRIVER_BRANCH_MIN = 450
"""Oldest driver branch gpufleet knows (the floor of CUDA 11.x)."""


def known_driver_branches() -> list[int]:
    """Driver branches that exist: NVIDIA numbers them in steps of 5, from 450 to the newest
    GA branch of the compatibility data."""
    newest = max(versions.driver_branch(c.ga_driver) for c in compat.load().cuda.values())
    return list(range(DRIVER_BRANCH_MIN, newest + 1, 5))


def check_driver_branch(value: object, name: str) -> str:
    known = known_driver_branches()
    allowed = f"empty, latest, or a driver branch {known[0]}-{known[-1]} (in steps of 5, e.g. 580)"
    text = single_line(value, name, 6, r"[0-9]{3}|latest", allowed)
    if text != "latest" and int(text) not in known:
        raise refuse(name, value, allowed)
    return text


def check_gpu_arch(value: object, name: str) -> str:
    text = single_line(
        value, name, 32, allowed="a GPU architecture: sm_80, 8.0 or a codename such as GA100"
    )
    try:
        gpuarch.parse_arch(text)
    except ValueError as exc:
        raise refuse(
            name, value, f"a known GPU architecture: sm_80, 8.0 or a codename such as GA100 ({exc})"
        ) from None
    return text


def check_serial(value: object, name: str) -> str:
    """A play's serial: a count 1-10000 or a percentage 1%-100%."""
    allowed = "a count of nodes (1-10000) or a percentage 1%-100%, e.g. 25%"
    text = single_line(value, name, 6, r"[0-9]{1,5}%?", allowed)
    num = int(text.rstrip("%"))
    if num < 1 or num > (100 if text.endswith("%") else 10000):
        raise refuse(name, value, allowed)
    return text


def preflight_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _each(v, "preflight_gpu_archs", check_gpu_arch, problems)
    _ranges(v, "preflight_", problems)
    _one(
        v,
        "preflight_cuda_repo_baseurl",
        lambda x, n: check_url(x, n, signed=True),
        problems,
        skip_empty=True,
    )
    return problems


def check_abs_path(value: object, name: str) -> str:
    """An absolute path to an existing thing gpufleet only reads or runs (an interpreter)."""
    allowed = "an absolute path such as /usr/bin/python3.11"
    text = single_line(value, name, 4096, r"/[^\s]*", allowed)
    if re.search(r"(^|/)\.\.(/|$)", text):
        raise refuse(name, value, allowed)
    return text


def python_bootstrap_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _ranges(v, "python_bootstrap_", problems)
    _one(v, "python_bootstrap_interpreter", check_abs_path, problems, skip_empty=True)
    _one(v, "python_bootstrap_os_release_file", check_abs_path, problems, skip_empty=True)
    return problems


_HEALTH_STATES = (
    r"(ALLOC|ANY|CYCLE|IDLE|MIXED|NONDRAINED_IDLE)(,(ALLOC|ANY|CYCLE|IDLE|MIXED|NONDRAINED_IDLE))*"
)


def check_named_file(value: object, name: str, pattern: str, allowed: str) -> str:
    """An absolute path whose file name matches ``pattern``: gpufleet writes or edits it
    as root, so the name keeps it from landing on a file it does not own."""
    text = check_abs_path(value, name)
    if re.fullmatch(pattern, text.rsplit("/", 1)[-1]) is None or text.endswith("/"):
        raise refuse(name, value, allowed)
    return text


def slurm_health_problems(v: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _ranges(v, "slurm_health_", problems)
    _one(
        v,
        "slurm_health_wrapper",
        lambda x, n: check_named_file(
            x,
            n,
            r"gpufleet[A-Za-z0-9._-]*",
            "an absolute path to a file named gpufleet*, e.g. /usr/local/sbin/gpufleet-healthcheck",
        ),
        problems,
    )
    _one(
        v,
        "slurm_health_output",
        lambda x, n: check_named_file(
            x, n, r"[A-Za-z0-9_][A-Za-z0-9._-]*\.json", "an absolute path to a .json file"
        ),
        problems,
    )
    _one(
        v,
        "slurm_health_slurm_conf",
        lambda x, n: check_named_file(
            x, n, r"slurm\.conf", "the absolute path of slurm.conf, e.g. /etc/slurm/slurm.conf"
        ),
        problems,
    )
    _one(v, "slurm_health_python", check_abs_path, problems, skip_empty=True)
    _one(
        v,
        "slurm_health_node_state",
        lambda x, n: single_line(
            x, n, 64, _HEALTH_STATES,
            "ANY, IDLE, ALLOC, MIXED or NONDRAINED_IDLE, a comma list, optionally with CYCLE",
        ),
        problems,
    )  # fmt: skip
    _one(v, "gpufleet_slurm_node_name", check_slurm_name, problems, skip_empty=True)
    return problems


def provision_problems(v: Mapping[str, Any]) -> list[str]:
    """Play-level variables of provision.yml."""
    problems: list[str] = []
    _one(v, "gpufleet_provision_serial", check_serial, problems)
    _each(v, "gpu_nodes", check_host_name, problems)
    return problems


ROLE_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "python_bootstrap": python_bootstrap_problems,
    "torch_env": torch_env_problems,
    "cluster_network": cluster_network_problems,
    "nvidia_driver": nvidia_driver_problems,
    "cuda_toolkit": cuda_toolkit_problems,
    "infiniband": infiniband_problems,
    "dcgm": dcgm_problems,
    "slurm_health": slurm_health_problems,
    "verify": verify_problems,
    "preflight": preflight_problems,
    "provision": provision_problems,
}


def input_problems(values: Mapping[str, Any], role: str, host: str = "") -> list[str]:
    """Every boundary problem of ``role``'s ``values``, each line prefixed by ``host: ``."""
    prefix = f"{host}: " if host else ""
    return [prefix + p for p in ROLE_CHECKS[role](values)]
