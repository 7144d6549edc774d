"""The value checks of each role's ``check_inputs`` entry point, in one place.

A role's variables pass two layers before any change: its argument spec (types, choices;
the action plugin ``gpufleet.core.check_inputs`` runs Ansible's own validator on it) and
the value checks here, which need neither facts nor a connection to the node:

- :func:`gpufleet.inputs.boundary.input_problems` for every role (one line, owned paths, specs,
  networks, ranges; docs/security.md);
- preflight: the formats of the three versions, then the planner for the versions alone
  (a torch release, variant or Python that no node can take is refused here, not after the
  driver was installed);
- cluster_network: the cluster CIDR, the explicit address and the group of the nodes;
- torch_env: the torch source (a wheelhouse needs find-links) and the lock (it exists on the
  controller, reads as a lock, and is of the forced variant and the env's Python); whether
  the source can serve the planned build needs the plan: preflight judges it.

The same functions serve a role run alone (its ``tasks/check_inputs.yml``) and
``playbooks/check_inventory.yml``, which checks every role for every node in one task.
Every problem is one line that names the node, the variable, its value and what is allowed.

Variables are named as the user wrote them (:func:`origins_of`): a role variable the user
did not set takes its role default, and when that default is ``{{ gpufleet_x }}`` (read
from the roles' ``defaults/main.yml``, no hand list) the message names ``gpufleet_x``, with
the role variable in parentheses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.inputs import boundary
from gpufleet.inputs.boundary import Origin, Origins
from gpufleet.inputs.value_rules import ROLE_VARS
from gpufleet.planning import network as netcfg
from gpufleet.planning import planner as planmod
from gpufleet.planning import torch_lock as torchlock
from gpufleet.planning import torch_source as torchsource

_TORCH = re.compile(r"^[0-9]+[.][0-9]+[.][0-9]+$")
_VARIANT = re.compile(r"^(cpu|cu[0-9]{3})$")
_PYTHON = re.compile(r"^3[.][0-9]{1,2}$")


#: the shared variable of each role variable the checks below name when nothing says where
#: its value came from (origins=None: the check play's usual case)
_SHARED = {
    "preflight_torch_version": "gpufleet_torch_version",
    "preflight_cuda_variant": "gpufleet_cuda_variant",
    "preflight_python_version": "gpufleet_python_version",
    "cluster_network_cidr": "gpufleet_cluster_cidr",
}
_FEEDS = re.compile(r"\{\{\s*(gpufleet_[A-Za-z0-9_]+)\s*\}\}")
_READS = re.compile(r"(?<![\w.])gpufleet_[A-Za-z0-9_]+")


def origins_of(
    defaults: Mapping[str, Any],
    given: Mapping[str, Any],
    names: Iterable[str],
    value_of: Callable[[str], object],
) -> dict[str, Origin]:
    """Where the value of each of ``names`` came from when the user did not set it.

    ``defaults``: the role defaults (a role's and its dependencies', raw, untemplated);
    ``given``: the task's variables (inventory, play, extra vars; raw). A name the task does
    not give, or gives as exactly its raw default (a task inside the role sees its
    defaults), took its default: its :class:`Origin` lists the shared ``gpufleet_*``
    variables that default reads (the names ``defaults`` holds that start with
    ``gpufleet_``), ``exact`` when the default is ``{{ gpufleet_x }}`` alone.
    ``value_of(name)``: a variable's value (templated), for the message.
    """
    shared = {n for n in defaults if n.startswith("gpufleet_")}
    out: dict[str, Origin] = {}
    for name in names:
        if name not in defaults or (name in given and given[name] != defaults[name]):
            continue
        raw = defaults[name]
        text = raw.strip() if isinstance(raw, str) else ""
        exact = _FEEDS.fullmatch(text)
        if exact and exact.group(1) in shared and exact.group(1) != name:
            source = exact.group(1)
            # the default is the shared variable alone: its value is the role variable's
            out[name] = Origin(((source, value_of(name)),), exact=True)
            continue
        reads = [n for n in dict.fromkeys(_READS.findall(text)) if n in shared and n != name]
        out[name] = Origin(tuple((n, value_of(n)) for n in reads))
    return out


def _named(var: str, value: object, origins: Origins | None, feeds: bool = True) -> str:
    """``gpufleet_x=value (feeds var)`` when gpufleet_x gave var its value, else
    ``var=value``; without ``origins`` the shared variable of :data:`_SHARED` (as before)."""
    if origins is None:
        shared = _SHARED.get(var)
        if shared:
            return f"{shared}={value}" + (f" ({var})" if feeds else "")
        return f"{var}={value}"
    origin = origins.get(var)
    if origin is not None and origin.exact:
        source = origin.sources[0][0]
        return f"{source}={value}" + (f" (feeds {var})" if feeds else "")
    return f"{var}={value}"


def own_names(role: str, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that belong to ``role``'s boundary check, sorted."""
    pattern = re.compile(ROLE_VARS.get(role, f"^{re.escape(role)}_"))
    return sorted(n for n in names if pattern.match(n))


def _matches(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.match(value) is not None


def preflight_version_problems(
    values: Mapping[str, Any], host: str, origins: Origins | None = None
) -> list[str]:
    """The formats of the torch, variant and Python versions; when all three are well
    formed, the planner's refusal for the versions alone (no node can take them)."""
    torch = values.get("preflight_torch_version")
    variant = values.get("preflight_cuda_variant", "")
    python = values.get("preflight_python_version")
    problems = []
    if not _matches(_TORCH, torch):
        problems.append(
            f"{host}: {_named('preflight_torch_version', torch, origins)} is not a torch "
            "release -> fix: write X.Y.Z, e.g. 2.13.0"
        )
    if not (variant in ("", None) or _matches(_VARIANT, variant)):
        problems.append(
            f"{host}: {_named('preflight_cuda_variant', variant, origins)} is not a wheel "
            'variant -> fix: "" (planner\'s choice), "cpu" or cuXXX such as cu126'
        )
    if not _matches(_PYTHON, python):
        problems.append(
            f"{host}: {_named('preflight_python_version', python, origins)} is not a "
            "Python release -> fix: write 3.X, e.g. 3.11"
        )
    if problems:
        return problems
    try:
        request = planmod.PlanRequest.from_mapping(
            {"torch": torch, "variant": variant or "", "python": python}
        )
        planmod.make_plan(request)
    except (RefusedError, ValueError) as exc:
        shown = variant if variant else '""'
        given = ", ".join(
            _named(var, value, origins, feeds=False)
            for var, value in (
                ("preflight_torch_version", torch),
                ("preflight_cuda_variant", shown),
                ("preflight_python_version", python),
            )
        )
        return [f"{host}: {given} cannot work on any node -> {exc}"]
    return []


def cluster_network_problems(
    values: Mapping[str, Any],
    host: str,
    groups: Mapping[str, Any],
    origins: Origins | None = None,
) -> list[str]:
    """The cluster CIDR and the group of the nodes (the address is the boundary's:
    gpufleet.inputs.value_rules)."""
    problems = []
    if origins is None:
        cidr_name = "gpufleet_cluster_cidr (cluster_network_cidr)"
    else:
        cidr_name = boundary.written("cluster_network_cidr", origins)
    try:
        netcfg.validated_cidr(values.get("cluster_network_cidr"), name=cidr_name)
    except (RefusedError, ValueError, TypeError) as exc:
        problems.append(f"{host}: {exc}")
    group = values.get("cluster_network_group")
    if not isinstance(group, str) or group not in groups:
        known = ", ".join(g for g in groups if g not in ("all", "ungrouped"))
        problems.append(
            f"{host}: {_named('cluster_network_group', group, origins)} is not a group of the "
            f"inventory -> allowed: one of {known}"
        )
    return problems


def torch_env_problems(
    values: Mapping[str, Any], host: str, origins: Origins | None = None
) -> list[str]:
    """The torch source settings and the lock file, as far as they can be judged without
    the plan (preflight judges the rest:
    :func:`gpufleet.provisioning.preflight_probe.torch_step`)."""

    def name(var: str) -> str:
        return boundary.written(var, origins)

    problems = []
    settings = torchsource.SourceSettings.from_mapping(
        {
            "source": values.get("torch_env_torch_source"),
            "index_url": values.get("torch_env_pip_index_url"),
            "find_links": values.get("torch_env_pip_find_links"),
            "names": {
                "source": name("torch_env_torch_source"),
                "index_url": name("torch_env_pip_index_url"),
                "find_links": name("torch_env_pip_find_links"),
            },
        }
    )
    try:
        torchsource.source_kind(settings)
    except RefusedError as exc:
        problems.append(f"{host}: {exc}")
    path = values.get("torch_env_lock_file")
    if not isinstance(path, str) or not path.strip():
        return problems
    head, sep, rest = name("torch_env_lock_file").partition(" (")
    where = f"{head}={path!r}{sep}{rest}"
    try:
        with open(path, encoding="utf-8") as fh:
            lock = torchlock.parse(fh.read(), where)
    except OSError as exc:
        problems.append(
            f"{host}: {where} cannot be read on the controller ({exc.strerror}) -> allowed: "
            '"" (no lock) or the path of a lock `gpufleet lock` wrote (make torch-lock)'
        )
        return problems
    except torchlock.LockError as exc:
        problems.append(f"{host}: {exc} -> fix: write it again with `gpufleet lock`")
        return problems
    checks = (
        ("variant", values.get("torch_env_wheel_variant"), "torch_env_wheel_variant"),
        ("python", values.get("torch_env_python_version"), "torch_env_python_version"),
    )
    for key, want, var in checks:
        if isinstance(want, str) and want.strip() and lock.header.get(key) != want.strip():
            problems.append(
                f"{host}: {where} was made for {key} {lock.header.get(key)!r} but "
                f"{name(var)}={want!r} -> fix: write a lock for it (gpufleet lock "
                f"--{'cuda' if key == 'variant' else key} {want}) or change {name(var)}"
            )
    return problems


def value_problems(
    role: str,
    values: Mapping[str, Any],
    host: str,
    groups: Mapping[str, Any],
    origins: Origins | None = None,
) -> list[str]:
    """Every value problem of ``role`` on ``host`` ([] when all are fine).

    ``values`` holds the role's variables as the role sees them (templated), at least
    those :func:`own_names` selects and the ones the role's extra checks read; ``origins``
    (:func:`origins_of`) the ones the user did not set, so each refusal names the variable
    the user wrote.
    """
    own = {n: values[n] for n in own_names(role, values)}
    problems = boundary.input_problems(own, role, host, origins)
    if role == "preflight":
        problems += preflight_version_problems(values, host, origins)
    elif role == "cluster_network":
        problems += cluster_network_problems(values, host, groups, origins)
    elif role == "torch_env":
        problems += torch_env_problems(values, host, origins)
    return problems
