"""The input boundary: every role variable's value checked against its rule, before any change.

gpufleet runs as root on every node, so every inventory value that is rendered into a file
(``.condarc``, ``pip.conf``, ``.repo``, the firewalld zone XML, ``nccl.env``, profile
scripts) or used as a path, an account, a port or a firewall source passes through here first
(docs/security.md). The rules are data (:mod:`gpufleet.inputs.value_rules`: variable ->
rule kind and parameters), the primitive validators are :mod:`gpufleet.inputs.rules`, and
:func:`input_problems` is the one checker that applies them. Each problem is one line that
names the variable, the value (``repr``, so control characters are visible) and what is
allowed.

A role variable the user did not set takes its role default; when that default reads a
shared ``gpufleet_*`` variable (``cluster_network_cidr: "{{ gpufleet_cluster_cidr }}"``),
the refusal names the variable the user wrote: ``gpufleet_cluster_cidr='0.0.0.0/0' (feeds
cluster_network_cidr) is refused -> ...`` (``origins``, :class:`Origin`; the action plugin
gpufleet.core.check_inputs knows which variables the node sets).

The Ansible side is a thin adapter (``gpufleet.core.input_problems`` and the
``gpufleet.core.single_line`` test); the check play runs it for every node before any change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from gpufleet.inputs import rules
from gpufleet.inputs.inventory import as_int
from gpufleet.inputs.known import (
    FOREIGN_ZONES,
    MAX_ALLREDUCE_SIZE,
    MAX_CIDR_HOSTS_V4,
    MAX_CIDR_HOSTS_V6,
    MAX_VALUE_LEN,
    NCCL_ENV_PREFIXES,
    PRIVILEGED_GROUPS,
    RUN_ID_ALLOWED,
    RUN_ID_PATTERN,
    RUN_ID_RESERVED,
    SERVICE_PORTS,
    SLURM_GRES_ALLOWED,
    SLURM_GRES_RE,
    SLURM_NAME_ALLOWED,
    SLURM_NAME_RE,
    SYSTEM_ACCOUNTS,
    SYSTEM_DIRS,
)
from gpufleet.inputs.rules import (
    DRIVER_BRANCH_MIN,
    BoundaryError,
    bound,
    check_abs_path,
    check_account,
    check_address,
    check_address_in,
    check_channel,
    check_driver_branch,
    check_duration,
    check_env_key,
    check_env_value,
    check_fingerprint,
    check_gpu_arch,
    check_group,
    check_host_name,
    check_matmul_shapes,
    check_named_file,
    check_network,
    check_owned_dir,
    check_owner,
    check_package_name,
    check_package_spec,
    check_port,
    check_profiles_dir,
    check_read_path,
    check_run_id,
    check_serial,
    check_sizes,
    check_slurm_gres,
    check_slurm_name,
    check_system_profile,
    check_timespan,
    check_url,
    check_write_dir,
    check_zone,
    is_single_line,
    known_driver_branches,
    number,
    refuse,
    single_line,
)
from gpufleet.inputs.value_rules import (
    HTTPS_ONLY,
    RANGES,
    REAL_RANGES,
    RELATIONS,
    ROLE_VARS,
    ROLES,
    VALUE_RULES,
    Relation,
    Rule,
)

#: The boundary's public names: its own and those of the modules it applies (importers
#: keep one place to import from).
__all__ = [
    "DRIVER_BRANCH_MIN",
    "FOREIGN_ZONES",
    "KINDS",
    "MAX_ALLREDUCE_SIZE",
    "MAX_CIDR_HOSTS_V4",
    "MAX_CIDR_HOSTS_V6",
    "MAX_VALUE_LEN",
    "NCCL_ENV_PREFIXES",
    "PRIVILEGED_GROUPS",
    "RANGES",
    "REAL_RANGES",
    "RELATIONS",
    "RELATION_KINDS",
    "ROLES",
    "ROLE_CHECKS",
    "ROLE_VARS",
    "RUN_ID_ALLOWED",
    "RUN_ID_PATTERN",
    "RUN_ID_RESERVED",
    "SERVICE_PORTS",
    "SLURM_GRES_ALLOWED",
    "SLURM_GRES_RE",
    "SLURM_NAME_ALLOWED",
    "SLURM_NAME_RE",
    "SYSTEM_ACCOUNTS",
    "SYSTEM_DIRS",
    "VALUE_RULES",
    "BoundaryError",
    "Origin",
    "Origins",
    "Relation",
    "Rule",
    "apply_rule",
    "bound",
    "check_abs_path",
    "check_account",
    "check_address",
    "check_address_in",
    "check_channel",
    "check_driver_branch",
    "check_duration",
    "check_env_key",
    "check_env_value",
    "check_fingerprint",
    "check_gpu_arch",
    "check_group",
    "check_host_name",
    "check_matmul_shapes",
    "check_named_file",
    "check_network",
    "check_owned_dir",
    "check_owner",
    "check_package_name",
    "check_package_spec",
    "check_port",
    "check_profiles_dir",
    "check_read_path",
    "check_run_id",
    "check_serial",
    "check_sizes",
    "check_slurm_gres",
    "check_slurm_name",
    "check_system_profile",
    "check_timespan",
    "check_url",
    "check_write_dir",
    "check_zone",
    "cluster_network_problems",
    "input_problems",
    "is_set",
    "is_single_line",
    "known_driver_branches",
    "message",
    "number",
    "preflight_problems",
    "problems_of",
    "refuse",
    "rename",
    "role_relations",
    "role_rules",
    "single_line",
    "torch_env_problems",
    "truthy",
    "verify_problems",
    "written",
]


@dataclass(frozen=True)
class Origin:
    """Where a role variable's value came from when the user did not set it: its role
    default, which reads ``sources`` (the shared ``gpufleet_*`` variables, with their
    values; empty for a plain default); ``exact``: the default is ``{{ gpufleet_x }}``."""

    sources: tuple[tuple[str, object], ...] = ()
    exact: bool = False


Origins = Mapping[str, Origin]


def truthy(value: object) -> bool:
    return str(value).strip().lower() in {"1", "true", "yes", "on", "y", "t"}


def is_set(value: object) -> bool:
    """Set to something: not null, not blank, not an empty list or mapping."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (Mapping, list, tuple)):
        return bool(value)
    return True


# --------------------------------------------------------------------------- naming


def written(var: str, origins: Origins | None) -> str:
    """``var`` as the user wrote it, for messages that are not this module's: the
    ``gpufleet_*`` variable that feeds it, with ``var`` in parentheses; ``var`` itself when
    the user set it (or nothing is known)."""
    origin = (origins or {}).get(var)
    if origin is None or not origin.sources:
        return var
    names = ", ".join(g for g, _ in origin.sources)
    return f"{names} (feeds {var})" if origin.exact else f"{var} (from {names})"


def rename(text: str, origins: Origins | None, names: Iterable[str] | None = None) -> str:
    """``text`` (a message of another layer, e.g. Ansible's argument spec) with the first
    mention of each role variable that a ``gpufleet_*`` variable fed replaced by
    :func:`written`."""
    for var in names if names is not None else list(origins or {}):
        label = written(var, origins)
        if label != var:
            pattern = re.compile(rf"(?<![\w\[]){re.escape(var)}(?!\w)")
            text = pattern.sub(label.replace("\\", "\\\\"), text, count=1)
    return text


def message(var: str, exc: BoundaryError, origins: Origins | None) -> str:
    """The refusal of ``var`` (``exc`` names it, or an item of it) as the user wrote it:
    ``gpufleet_x='v' (feeds var) is refused`` when var's role default is
    ``{{ gpufleet_x }}``; ``gpufleet_x='v' (feeds var='v/sub') ...`` when it is derived from
    it; ``var=... is refused`` when the user set var."""
    origin = (origins or {}).get(var)
    if origin is None or not origin.sources or not exc.name.startswith(var):
        return str(exc)
    allowed = exc.allowed
    if origin.exact:
        ((source, _),) = origin.sources
        shown = source + exc.name[len(var) :]
        head = f"{shown}={rules.show(exc.value)} (feeds {var})"
        # advice at the level the user writes: gpufleet_* names for the fed siblings
        for sibling, sib in (origins or {}).items():
            if sib.exact and sib.sources and sibling != var:
                allowed = re.sub(rf"(?<!\w){re.escape(sibling)}(?!\w)", sib.sources[0][0], allowed)
    else:
        sources = ", ".join(f"{g}={rules.show(v)}" for g, v in origin.sources)
        head = f"{sources} (feeds {exc.name}={rules.show(exc.value)})"
    return f"{head} is refused -> allowed: {allowed}"


# --------------------------------------------------------------------------- rule kinds

Kind = Callable[[object, str, Mapping[str, Any], Mapping[str, Any]], object]


def _simple(func: Callable[..., object]) -> Kind:
    """A kind that needs the value, its name and the rule's parameters only."""
    return lambda x, n, _v, p: func(x, n, **p)


def _trusted(values: Mapping[str, Any], var: str | None) -> list[str]:
    hosts = values.get(var) if var else None
    return [str(h) for h in hosts or [] if isinstance(h, str)]


def _url(x: object, n: str, v: Mapping[str, Any], p: Mapping[str, Any]) -> object:
    trusted = _trusted(v, p.get("trusted_from"))
    https_only = truthy(v.get(HTTPS_ONLY, True))
    return check_url(x, n, trusted, p.get("allow_path", False), p.get("signed", False), https_only)


def _range(x: object, n: str, _v: Mapping[str, Any], p: Mapping[str, Any]) -> float:
    lo, hi, what = RANGES[p["row"]]
    try:
        return number(x, n, lo, hi, integer=p["row"] not in REAL_RANGES)
    except BoundaryError as exc:
        raise BoundaryError(exc.name, exc.value, f"{exc.allowed} ({what})") from None


def _port(x: object, n: str, v: Mapping[str, Any], p: Mapping[str, Any]) -> int:
    lo, hi, _ = RANGES[p["row"]]
    _range(x, n, v, p)
    return check_port(x, n, int(lo), int(hi))


def _port_range(x: object, n: str, _v: Mapping[str, Any], _p: Mapping[str, Any]) -> str:
    """LOW-HIGH with 1024 <= LOW < HIGH <= 65535 (the ephemeral ports NCCL may use)."""
    text = single_line(x, n, 11, r"[0-9]{1,5}-[0-9]{1,5}", "FIRST-LAST, e.g. 32768-60999")
    low, high = (int(part) for part in text.split("-"))
    if not 1024 <= low < high <= 65535:
        raise refuse(n, x, "LOW-HIGH with 1024 <= LOW < HIGH <= 65535, e.g. 32768-60999")
    return text


KINDS: dict[str, Kind] = {
    "line": _simple(single_line),
    "owned_dir": _simple(check_owned_dir),
    "read_path": _simple(check_read_path),
    "abs_path": _simple(check_abs_path),
    "write_dir": _simple(check_write_dir),
    "timespan": lambda x, n, _v, p: check_timespan(x, n, p["lowest"], p["highest"]),
    "named_file": _simple(check_named_file),
    "channel": _simple(check_channel),
    "package_spec": _simple(check_package_spec),
    "package_name": _simple(check_package_name),
    "fingerprint": _simple(check_fingerprint),
    "zone": _simple(check_zone),
    "env_key": _simple(check_env_key),
    "env_value": _simple(check_env_value),
    "driver_branch": _simple(check_driver_branch),
    "gpu_arch": _simple(check_gpu_arch),
    "system_profile": lambda x, n, v, p: check_system_profile(
        x, n, str(v.get(p.get("dir_from", ""), "") or "")
    ),
    "profiles_dir": _simple(check_profiles_dir),
    "duration": _simple(check_duration),
    "matmul_shapes": _simple(check_matmul_shapes),
    "run_id": _simple(check_run_id),
    "slurm_name": _simple(check_slurm_name),
    "slurm_gres": _simple(check_slurm_gres),
    "host_name": _simple(check_host_name),
    "serial": _simple(check_serial),
    "sizes": _simple(check_sizes),
    "url": _url,
    "range": _range,
    "port": _port,
    "port_range": _port_range,
    "owner": lambda x, n, v, p: check_owner(
        x, n, False, p["create_flag"] in v and not truthy(v[p["create_flag"]])
    ),
    "group": lambda x, n, v, p: check_group(x, n, str(v.get(p["owner_from"], ""))),
    "network": lambda x, n, v, p: check_network(
        x, n, truthy(v.get(p["opt_in"], False)), p["opt_in"]
    ),
    "address": lambda x, n, v, p: check_address_in(x, n, v.get(p["cidr_from"])),
}
"""Rule kind -> the validator that applies it: (value, name, the role's values, params)."""


def _check(kind: str, value: object, name: str, values: Mapping[str, Any], params: Any) -> None:
    KINDS[kind](value, name, values, params)
    rules.no_blank_ends(value, name)


def apply_rule(rule: Rule, var: str, values: Mapping[str, Any]) -> list[BoundaryError]:
    """Every refusal of ``rule`` for ``values[var]`` (its items, for a list or mapping)."""
    value = values[var]
    if rule.when is not None and values.get(rule.when[0], rule.when[1]) != rule.when[1]:
        return []
    if value is None or (rule.skip_empty and value == ""):
        return []
    out: list[BoundaryError] = []

    def run(kind: str, item: object, name: str, params: Any = rule.params) -> None:
        try:
            _check(kind, item, name, values, params)
        except BoundaryError as exc:
            out.append(exc)

    if rule.shape == "list":
        if isinstance(value, (Mapping, str)) or not isinstance(value, Iterable):
            return [refuse(var, value, "a list")]
        for i, item in enumerate(value):
            run(rule.kind, item, f"{var}[{i}]")
    elif rule.shape == "mapping":
        if not isinstance(value, Mapping):
            return [refuse(var, value, "a mapping KEY: value")]
        for key, item in value.items():
            if rule.keys is not None:
                before = len(out)
                run(rule.keys.kind, key, f"{var} key", rule.keys.params)
                if len(out) > before:
                    continue
            run(rule.kind, item, f"{var}[{key!r}]")
    else:
        run(rule.kind, value, var)
    return out


# --------------------------------------------------------------------------- relations


def _needs(v: Mapping[str, Any], p: Mapping[str, Any], origins: Origins | None) -> list[Any]:
    trigger = v.get(p["var"])
    on = truthy(trigger) if p.get("test") == "true" else is_set(trigger)
    if not on or is_set(v.get(p["needs"])):
        return []
    named = p[p.get("name", "var")]
    return [(named, refuse(named, v.get(named), p["allowed"]))]


def _differs(v: Mapping[str, Any], p: Mapping[str, Any], origins: Origins | None) -> list[Any]:
    cond, want = p["when"]
    a, b = v.get(p["var"]), v.get(p["other"])
    if v.get(cond) != want or not isinstance(a, str) or not isinstance(b, str):
        return []
    if rules.norm_path(a) != rules.norm_path(b):
        return []
    return [(p["var"], refuse(p["var"], a, p["allowed"]))]


def _port_outside_range(
    v: Mapping[str, Any], p: Mapping[str, Any], origins: Origins | None
) -> list[Any]:
    text, port = v.get(p["range"]), v.get(p["var"])
    if not truthy(v.get(p["when_true"], False)) or not isinstance(text, str):
        return []
    if re.fullmatch(r"[0-9]{1,5}-[0-9]{1,5}", text) is None or not isinstance(port, int):
        return []
    low, high = (int(x) for x in text.split("-"))
    if not (1024 <= low < high <= 65535 and low <= port <= high):
        return []
    allowed = (
        f"a port outside {p['range']} {text} (another process may hold a port of the "
        "ephemeral range when torchrun starts)"
    )
    return [(p["var"], refuse(p["var"], port, allowed))]


def _distinct_ports(
    v: Mapping[str, Any], p: Mapping[str, Any], origins: Origins | None
) -> list[Any]:
    """Two port variables with one value: named is the one the user set (the other took
    its default), else the first."""
    out = []
    names = [n for n in (p["var"], *p["ports"]) if as_int(v.get(n)) is not None]
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if as_int(v[first]) != as_int(v[second]):
                continue
            defaulted = set(origins or {})
            named, other = (
                (second, first)
                if first in defaulted and second not in defaulted
                else (first, second)
            )
            allowed = (
                f"a port other than {written(other, origins)}={as_int(v[other])}: every "
                "port gpufleet listens on is its own (the rendezvous master and the probe "
                "listen at the same time)"
            )
            out.append((named, refuse(named, v[named], allowed)))
    return out


RelationKind = Callable[[Mapping[str, Any], Mapping[str, Any], Origins | None], list[Any]]

RELATION_KINDS: dict[str, RelationKind] = {
    "needs": _needs,
    "differs": _differs,
    "port_outside_range": _port_outside_range,
    "distinct_ports": _distinct_ports,
}
"""Relation kind -> its check: (values, params, origins) -> [(variable named, refusal)]."""


# --------------------------------------------------------------------------- the checker


def _own(role: str) -> re.Pattern[str]:
    return re.compile(ROLE_VARS.get(role, f"^{re.escape(role)}_"))


def role_rules(role: str) -> list[tuple[str, Rule]]:
    """(variable, rule) of every variable ``role`` checks: its VALUE_RULES rows, then the
    RANGES rows without one (a ``port`` rule reads its RANGES row itself)."""
    own = _own(role)
    out = [(n, r) for n, r in VALUE_RULES.items() if own.match(n)]
    for name, rule in out:
        if rule.kind == "port":
            out[out.index((name, rule))] = (name, Rule("port", {"row": name}))
    out += [(n, Rule("range", {"row": n})) for n in RANGES if own.match(n) and n not in VALUE_RULES]
    return out


def role_relations(role: str) -> list[Relation]:
    own = _own(role)
    return [r for r in RELATIONS if own.match(r.params["var"])]


def problems_of(values: Mapping[str, Any], role: str, origins: Origins | None = None) -> list[str]:
    """Every boundary problem of ``role``'s ``values`` (no host prefix)."""
    if role not in ROLES:
        raise KeyError(role)
    out: list[str] = []
    for var, rule in role_rules(role):
        if var in values:
            out += [message(var, exc, origins) for exc in apply_rule(rule, var, values)]
    for relation in role_relations(role):
        for var, exc in RELATION_KINDS[relation.kind](values, relation.params, origins):
            out.append(message(var, exc, origins))
    return out


def input_problems(
    values: Mapping[str, Any], role: str, host: str = "", origins: Origins | None = None
) -> list[str]:
    """Every boundary problem of ``role``'s ``values``, each line prefixed by ``host: ``.
    ``origins``: the role variables the user did not set (:class:`Origin`), so a refusal
    names the ``gpufleet_*`` variable that fed one."""
    prefix = f"{host}: " if host else ""
    return [prefix + p for p in problems_of(values, role, origins)]


ROLE_CHECKS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    role: partial(problems_of, role=role) for role in ROLES
}
"""Role -> its check over a mapping of values (as :func:`problems_of`)."""

torch_env_problems = ROLE_CHECKS["torch_env"]
cluster_network_problems = ROLE_CHECKS["cluster_network"]
verify_problems = ROLE_CHECKS["verify"]
preflight_problems = ROLE_CHECKS["preflight"]
