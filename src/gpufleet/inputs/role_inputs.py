"""The value checks of each role's ``check_inputs`` entry point, in one place.

A role's variables pass two layers before any change: its argument spec (types, choices;
the action plugin ``gpufleet.core.check_inputs`` runs Ansible's own validator on it) and
the value checks here, which need neither facts nor a connection to the node:

- :func:`gpufleet.inputs.boundary.input_problems` for every role (one line, owned paths, specs,
  networks, ranges; docs/security.md);
- preflight: the formats of the three versions, then the planner for the versions alone
  (a torch release, variant or Python that no node can take is refused here, not after the
  driver was installed);
- cluster_network: the cluster CIDR, the explicit address and the group of the nodes.

The same functions serve a role run alone (its ``tasks/check_inputs.yml``) and
``playbooks/check_inventory.yml``, which checks every role for every node in one task.
Every problem is one line that names the node, the variable, its value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.errors import RefusedError
from gpufleet.inputs import boundary
from gpufleet.inputs.value_rules import ROLE_VARS
from gpufleet.planning import network as netcfg
from gpufleet.planning import planner as planmod

_TORCH = re.compile(r"^[0-9]+[.][0-9]+[.][0-9]+$")
_VARIANT = re.compile(r"^(cpu|cu[0-9]{3})$")
_PYTHON = re.compile(r"^3[.][0-9]{1,2}$")


def own_names(role: str, names: Iterable[str]) -> list[str]:
    """The names among ``names`` that belong to ``role``'s boundary check, sorted."""
    pattern = re.compile(ROLE_VARS.get(role, f"^{re.escape(role)}_"))
    return sorted(n for n in names if pattern.match(n))


def _matches(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.match(value) is not None


def preflight_version_problems(values: Mapping[str, Any], host: str) -> list[str]:
    """The formats of the torch, variant and Python versions; when all three are well
    formed, the planner's refusal for the versions alone (no node can take them)."""
    torch = values.get("preflight_torch_version")
    variant = values.get("preflight_cuda_variant", "")
    python = values.get("preflight_python_version")
    problems = []
    if not _matches(_TORCH, torch):
        problems.append(
            f"{host}: gpufleet_torch_version={torch} (preflight_torch_version) is not a torch "
            "release -> fix: write X.Y.Z, e.g. 2.13.0"
        )
    if not (variant in ("", None) or _matches(_VARIANT, variant)):
        problems.append(
            f"{host}: gpufleet_cuda_variant={variant} (preflight_cuda_variant) is not a wheel "
            'variant -> fix: "" (planner\'s choice), "cpu" or cuXXX such as cu126'
        )
    if not _matches(_PYTHON, python):
        problems.append(
            f"{host}: gpufleet_python_version={python} (preflight_python_version) is not a "
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
        return [
            f"{host}: gpufleet_torch_version={torch}, gpufleet_cuda_variant={shown}, "
            f"gpufleet_python_version={python} cannot work on any node -> {exc}"
        ]
    return []


def cluster_network_problems(
    values: Mapping[str, Any], host: str, groups: Mapping[str, Any]
) -> list[str]:
    """The cluster CIDR, the explicit address (when set) and the group of the nodes."""
    problems = []
    try:
        netcfg.validated_cidr(
            values.get("cluster_network_cidr"), name="gpufleet_cluster_cidr (cluster_network_cidr)"
        )
    except (RefusedError, ValueError, TypeError) as exc:
        problems.append(f"{host}: {exc}")
    address = values.get("cluster_network_address", "")
    if str(address if address is not None else "").strip():
        try:
            netcfg.validated_address(
                address, name="gpufleet_cluster_address (cluster_network_address)"
            )
        except (RefusedError, ValueError, TypeError) as exc:
            problems.append(f"{host}: {exc}")
    group = values.get("cluster_network_group")
    if not isinstance(group, str) or group not in groups:
        known = ", ".join(g for g in groups if g not in ("all", "ungrouped"))
        problems.append(
            f"{host}: cluster_network_group={group} is not a group of the inventory -> "
            f"allowed: one of {known}"
        )
    return problems


def value_problems(
    role: str, values: Mapping[str, Any], host: str, groups: Mapping[str, Any]
) -> list[str]:
    """Every value problem of ``role`` on ``host`` ([] when all are fine).

    ``values`` holds the role's variables as the role sees them (templated), at least
    those :func:`own_names` selects and the ones the role's extra checks read.
    """
    own = {n: values[n] for n in own_names(role, values)}
    problems = boundary.input_problems(own, role, host)
    if role == "preflight":
        problems += preflight_version_problems(values, host)
    elif role == "cluster_network":
        problems += cluster_network_problems(values, host, groups)
    return problems
