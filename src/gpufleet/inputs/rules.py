"""The primitive validators of the input boundary: one value, one rule, one refusal.

Each ``check_*`` takes the value and the name to print, returns the value as accepted (a
string, a normalised path, ...) and raises :class:`BoundaryError` whose message names the
variable, the value (``repr``, so control characters are visible) and what is allowed.
Which variable takes which rule is data (:mod:`gpufleet.inputs.value_rules`); the checker
that applies the table is :mod:`gpufleet.inputs.boundary`.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
from collections.abc import Iterable
from importlib import resources

from gpufleet.errors import RefusedError
from gpufleet.inputs import addresses, credentials, known, profile_file
from gpufleet.planning import compat, gpuarch, versions
from gpufleet.units import (
    DURATION_ALLOWED,
    TIMESPAN_ALLOWED,
    human_size,
    parse_duration,
    parse_sizes,
    parse_timespan,
)

# Anything below U+0020, DEL, the C1 block and the Unicode line/paragraph separators: each
# can end a line in one of the formats rendered (YAML, INI, XML, shell) or hide text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u0085]")

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
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"]*@")
_DOTDOT = re.compile(r"(^|/)\.\.(/|$)")


def show(value: object) -> str:
    """``value`` as messages quote it: credentials in a URL (``user:token@``) masked, since
    refusals are printed and logged."""
    text = _USERINFO.sub(r"\1***@", repr(value))
    return text if len(text) <= 120 else text[:117] + "..."


class BoundaryError(RefusedError, ValueError):
    """A value refused at the input boundary (exit 2). ``name``, ``value`` and ``allowed``
    are kept, so the checker can name the variable as the user wrote it."""

    def __init__(self, name: str, value: object = None, allowed: str = "") -> None:
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"{name}={show(value)} is refused -> allowed: {allowed}")


def refuse(name: str, value: object, allowed: str) -> BoundaryError:
    return BoundaryError(name, value, allowed)


def single_line(
    value: object,
    name: str,
    max_len: int = known.MAX_VALUE_LEN,
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


def is_single_line(value: object, max_len: int = known.MAX_VALUE_LEN) -> bool:
    try:
        single_line(value, "value", max_len)
    except BoundaryError:
        return False
    return True


def no_blank_ends(value: object, name: str) -> object:
    """A string without leading or trailing whitespace (``"node1 "`` would name another
    host, path or account than the one meant); other types pass unchanged."""
    if isinstance(value, str) and value != value.strip():
        hint = f" (did you mean {show(value.strip())}?)" if value.strip() else ""
        raise refuse(name, value, f"the value without leading or trailing whitespace{hint}")
    return value


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


def check_port(value: object, name: str, lo: int = 1, hi: int = 65535) -> int:
    """A TCP port gpufleet listens on or opens: in [lo, hi], not privileged (below 1024,
    the system services' range) and no port of a service the nodes run (SSH's 22, Slurm's
    6817-6819, NFS, DCGM, ...)."""
    port = int(number(value, name, lo, hi))
    services = ", ".join(str(p) for p in sorted(known.SERVICE_PORTS) if p >= known.PRIVILEGED_PORTS)
    allowed = (
        f"a port {known.PRIVILEGED_PORTS}-{bound(hi)} that no service of the nodes uses (not "
        f"below {known.PRIVILEGED_PORTS}, not {services})"
    )
    if port in known.SERVICE_PORTS:
        raise refuse(name, value, f"{allowed}; {port} is the port of {known.SERVICE_PORTS[port]}")
    if port < known.PRIVILEGED_PORTS:
        raise refuse(
            name,
            value,
            f"{allowed}; {port} is a privileged port, where the nodes' system services listen",
        )
    return port


def norm_path(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p and p != ".")


def check_owned_dir(path: object, name: str) -> str:
    """An absolute path gpufleet may create and own: not a system directory, no '..'."""
    allowed = (
        "an absolute path that gpufleet creates and owns, at least two levels deep, "
        "e.g. /opt/gpufleet/env (system directories such as /usr, /etc, /tmp, /var/lib and "
        "their OS-owned children are refused, docs/security.md)"
    )
    text = single_line(path, name, 4096, allowed=allowed)
    if not text.startswith("/") or _DOTDOT.search(text):
        raise refuse(name, path, allowed)
    norm = norm_path(text)
    parent = norm.rsplit("/", 1)[0] or "/"
    if (
        norm in known.SYSTEM_DIRS
        or norm.count("/") < 2
        or parent in known.NO_DIRECT_CHILDREN
        or (parent == "/etc" and norm != "/etc/gpufleet")
    ):
        raise refuse(name, path, allowed)
    return norm


def check_read_path(value: object, name: str) -> str:
    """An absolute path gpufleet only reads (sysfs roots): one line, no '..'."""
    allowed = "an absolute path without '..', e.g. /sys/class/infiniband"
    text = single_line(value, name, 4096, allowed=allowed)
    if not text.startswith("/") or _DOTDOT.search(text):
        raise refuse(name, value, allowed)
    return text


def check_write_dir(value: object, name: str) -> str:
    """A directory gpufleet writes a file into but does not own (node_exporter's textfile
    directory): absolute, no '..', not a top-level directory."""
    allowed = "an absolute directory path without '..', e.g. /var/lib/node_exporter"
    text = single_line(value, name, 4096, r"/[^\s]*", allowed)
    if _DOTDOT.search(text) or norm_path(text).count("/") < 2:
        raise refuse(name, value, allowed)
    return norm_path(text)


def check_timespan(value: object, name: str, lowest: float, highest: float) -> float:
    """A systemd time span (``5min``, ``300``, ``1h 30min``) from ``lowest`` to ``highest``
    seconds; the seconds."""
    allowed = f"{TIMESPAN_ALLOWED}, from {lowest:g} s to {highest:g} s"
    try:
        seconds = parse_timespan(value)
    except ValueError:
        raise refuse(name, value, allowed) from None
    if not lowest <= seconds <= highest:
        raise refuse(name, value, allowed)
    return seconds


def check_abs_path(value: object, name: str) -> str:
    """An absolute path to an existing thing gpufleet only reads or runs (an interpreter)."""
    allowed = "an absolute path such as /usr/bin/python3.11"
    text = single_line(value, name, 4096, r"/[^\s]*", allowed)
    if _DOTDOT.search(text):
        raise refuse(name, value, allowed)
    return text


def check_named_file(value: object, name: str, pattern: str, allowed: str) -> str:
    """An absolute path whose file name matches ``pattern``: gpufleet writes or edits it
    as root, so the name keeps it from landing on a file it does not own."""
    text = check_abs_path(value, name)
    if re.fullmatch(pattern, text.rsplit("/", 1)[-1]) is None or text.endswith("/"):
        raise refuse(name, value, allowed)
    return text


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
    if group in known.PRIVILEGED_GROUPS and not (group == "root" and owner == "root"):
        raise refuse(
            name,
            value,
            f"a group without privileges (not {', '.join(sorted(known.PRIVILEGED_GROUPS))}), "
            "e.g. gpufleet",
        )
    return group


def check_owner(value: object, name: str, existing: bool, use_as_is: bool) -> str:
    """The env owner: an account gpufleet creates, or (use_as_is, i.e.
    torch_env_create_owner: false) an existing one used as it is, never modified."""
    owner = check_account(value, name)
    if owner == "root":  # the role never creates or modifies root (tasks/main.yml)
        return owner
    if not use_as_is and owner in known.SYSTEM_ACCOUNTS:
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
    prefixes = ", ".join(known.NCCL_ENV_PREFIXES)
    allowed = f"a key starting with {prefixes} (A-Z 0-9 _), not a loader/path variable"
    text = single_line(key, name, 128, r"[A-Z][A-Z0-9_]*", allowed)
    if not text.startswith(known.NCCL_ENV_PREFIXES) or known.ENV_DENY.search(
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
    allowed = "40 or 64 hexadecimal digits (spaces allowed between groups)"
    text = single_line(value, name, 80, allowed=allowed)
    compact = text.replace(" ", "").upper()
    if not _GPG_FINGERPRINT.fullmatch(compact):
        raise refuse(name, value, allowed)
    return compact


def _no_zone(value: object, name: str, text: str, what: str) -> None:
    """An address with a zone (``fe80::1%eth0``) names an interface of one node: it means
    nothing on the other nodes, and firewalld, NCCL and torchrun take no zone."""
    if "%" in text:
        raise refuse(
            name,
            value,
            f"{what} without a zone (no %interface): a zone names an interface of one node "
            f"only, e.g. {text.split('%', 1)[0] or 'fe80::1'} is still link-local; use a "
            "global or unique-local address",
        )


def check_network(value: object, name: str, allow_wide: bool, opt_in: str) -> str:
    text = single_line(value, name, 64, allowed="an address or ADDRESS/PREFIX")
    _no_zone(value, name, text, "an address or ADDRESS/PREFIX")
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise refuse(name, value, "an address or ADDRESS/PREFIX, e.g. 10.0.0.0/24") from None
    limit = known.MAX_CIDR_HOSTS_V4 if net.version == 4 else known.MAX_CIDR_HOSTS_V6
    if net.prefixlen < limit and not allow_wide:
        raise refuse(
            name,
            value,
            f"a prefix of /{limit} or narrower: /{net.prefixlen} opens the cluster ports "
            f"(every port with restrict_ports false) to {net.num_addresses} addresses; "
            f"set {opt_in}: true to accept that",
        )
    return text


def check_address(value: object, name: str) -> str:
    """A node's cluster address (:func:`gpufleet.inputs.addresses.form_problem`)."""
    text = single_line(value, name, 64, allowed=addresses.ADDRESS_ALLOWED)
    why = addresses.form_problem(text)
    if why:
        raise refuse(name, value, f"{addresses.ADDRESS_ALLOWED}; {text!r} {why}")
    return text


def check_address_in(value: object, name: str, cidr: object) -> str:
    """A node's cluster address that is a host of the network ``cidr`` (when that is a
    network): not its network or broadcast address."""
    text = check_address(value, name)
    try:
        network = ipaddress.ip_network(str(cidr).strip(), strict=True)
    except ValueError:
        return text  # the network's own check names it
    why = addresses.host_problem(ipaddress.ip_address(text), network)
    if why:
        raise refuse(name, value, f"a host address of {network.with_prefixlen}; {text!r} {why}")
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
    if zone.lower() in known.FOREIGN_ZONES:
        raise refuse(
            name,
            value,
            "a zone of gpufleet's own, not one of firewalld/libvirt/docker: "
            + ", ".join(sorted(known.FOREIGN_ZONES)),
        )
    return zone


def check_url(
    value: object,
    name: str,
    trusted_hosts: Iterable[str] = (),
    allow_path: bool = False,
    signed: bool = False,
    https_only: bool = False,
) -> str:
    """A URL on one line. ``signed``: what it serves is checked against a pinned GPG key
    (dnf repositories with gpgcheck, keys with their fingerprint), so plain http is allowed;
    otherwise http only for a host in ``trusted_hosts``. Credentials (``user:password@``)
    must be readable as the roles split them (:mod:`gpufleet.inputs.credentials`) and, with
    ``https_only``, travel over https only; no refusal shows them."""
    if isinstance(value, str):
        bad = credentials.problems(value, https_only)
        if bad:
            raise refuse(name, value, "; ".join(bad))
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
    text = single_line(value, name, known.MAX_VALUE_LEN, r"[^\s\"'<>\\`]+", allowed)
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
        known.MAX_VALUE_LEN,
        _CHANNEL.pattern,
        "a conda channel name (e.g. conda-forge) or an https:// URL",
    )


def check_slurm_name(value: object, name: str) -> str:
    """A Slurm partition, account, QOS, reservation or node name (gpufleet.verify.launchers.slurm's
    rule)."""
    return single_line(value, name, 64, known.SLURM_NAME_RE.pattern, known.SLURM_NAME_ALLOWED)


def check_slurm_gres(value: object, name: str) -> str:
    """``auto`` or a GRES list (sbatch --gres)."""
    allowed = f'auto, "" (none) or {known.SLURM_GRES_ALLOWED}'
    text = single_line(value, name, 128, allowed=allowed)
    if text != "auto" and known.SLURM_GRES_RE.fullmatch(text) is None:
        raise refuse(name, value, allowed)
    return text


def check_run_id(value: object, name: str) -> str:
    """A run id (gpufleet.verify.run_id's rule: its pattern, ``latest`` reserved)."""
    allowed = known.RUN_ID_ALLOWED
    text = single_line(value, name, 64, known.RUN_ID_PATTERN.pattern, allowed)
    if text.lower() in known.RUN_ID_RESERVED:
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
    branches = known_driver_branches()
    allowed = (
        f"empty, latest, or a driver branch {branches[0]}-{branches[-1]} (in steps of 5, e.g. 580)"
    )
    text = single_line(value, name, 6, r"[0-9]{3}|latest", allowed)
    if text != "latest" and int(text) not in branches:
        raise refuse(name, value, allowed)
    return text


#: where the shipped system profiles live in the package (gpufleet.node.profiles loads them;
#: each file is named after its profile, which the loader enforces)
SYSTEM_PROFILE_DIR = "data/profiles"


@functools.cache
def known_system_profiles() -> tuple[str, ...]:
    """The names of the shipped system profiles (docs/profiles.md)."""
    root = resources.files("gpufleet").joinpath(SYSTEM_PROFILE_DIR)
    return tuple(sorted(e.name[:-5] for e in root.iterdir() if e.name.endswith(".json")))


def site_profile_names(site_dir: str) -> tuple[str, ...]:
    """The names a site's profile directory adds (none when it is unset or broken: the
    directory's own check, :func:`check_profiles_dir`, names what is wrong with it)."""
    if not site_dir:
        return ()
    try:
        loaded = profile_file.load_profiles(site_dir=site_dir)
    except profile_file.ProfileFileError:
        return ()
    return tuple(n for n, p in loaded.items() if p.origin == "site")


def check_system_profile(value: object, name: str, site_dir: str = "") -> str:
    """``auto`` or the name of a shipped system profile, or of one of the site's profile
    directory ``site_dir`` (gpufleet_profiles_dir) (the host's gpufleet_system_profile)."""
    profiles = tuple(sorted({*known_system_profiles(), *site_profile_names(site_dir)}))
    allowed = (
        f"auto (detected from the GPUs) or a system profile: {', '.join(profiles)} "
        "(`gpufleet profile show`; docs/profiles.md says how to add one)"
    )
    text = single_line(value, name, 64, r"[A-Za-z0-9][A-Za-z0-9._-]*", allowed)
    if text != "auto" and text not in profiles:
        raise refuse(name, value, allowed)
    return text


def check_profiles_dir(value: object, name: str) -> str:
    """A directory of a site's own profile files on the controller, every file valid
    (schema, units, sources; one that extends a known profile): read before any change."""
    allowed = (
        "a directory on the controller holding the site's profile files (*.json), each a "
        "whole profile or one that extends a shipped profile, every figure with its source "
        "and its floor's unit (docs/profiles.md, 'Site profiles')"
    )
    text = single_line(value, name, 4096, r"[^\s]+", allowed)
    try:
        profile_file.load_profiles(site_dir=text)
    except profile_file.ProfileFileError as exc:
        raise refuse(name, value, f"{allowed}; {exc}") from None
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


SIZES_ALLOWED = (
    'a comma list of sizes > 0 in bytes or with K, M, G, e.g. "4K,64K,1M,8M" '
    '("" = per-mode defaults)'
)


def check_sizes(value: object, name: str, largest: int = known.MAX_ALLREDUCE_SIZE) -> list[int]:
    """The all-reduce sizes of verify: each > 0 and at most ``largest`` bytes (every rank
    holds a buffer of each size, and a working copy, in GPU or host memory)."""
    try:
        sizes = parse_sizes(single_line(value, name, 512))
    except RefusedError:
        raise refuse(name, value, SIZES_ALLOWED) from None
    too_big = [s for s in sizes if s > largest]
    if too_big:
        raise refuse(
            name,
            value,
            f"sizes of at most {human_size(largest)} each: every rank holds a buffer of each "
            "size and a working copy of it in GPU memory (host memory in CPU mode), and "
            f"{human_size(too_big[-1])} is beyond any node's memory",
        )
    return sizes


def check_duration(value: object, name: str) -> int:
    """A duration as users write it (90s, 2m, 30m, 1h; 1 s to 7 days): the seconds."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise refuse(name, value, DURATION_ALLOWED)
    try:
        return parse_duration(str(value), name)
    except RefusedError:
        raise refuse(name, value, DURATION_ALLOWED) from None


MATMUL_SHAPES_ALLOWED = (
    "a comma list of matmul shapes, N (a cube) or MxNxK, each side 1-65536, "
    "e.g. 4096,8192x8192x4096"
)
_SHAPE = r"[0-9]{1,5}(x[0-9]{1,5}x[0-9]{1,5})?"


def check_matmul_shapes(value: object, name: str) -> str:
    """The compute sweep's shapes (gpufleet.node.compute_bench.parse_shapes' grammar)."""
    text = single_line(value, name, 512, f"{_SHAPE}(,{_SHAPE})*", MATMUL_SHAPES_ALLOWED)
    if any(not 1 <= int(side) <= 65536 for side in re.split(r"[,x]", text)):
        raise refuse(name, value, MATMUL_SHAPES_ALLOWED)
    return text
