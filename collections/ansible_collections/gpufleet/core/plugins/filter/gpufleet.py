# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0
"""Filters through which the roles reach the gpufleet planner (the single version truth).

gpufleet.core.plan             inputs (dict and/or kwargs) -> plan dict; a refusal raises
                               AnsibleFilterError carrying the planner's paragraph verbatim
gpufleet.core.plan_check       same inputs -> {"plan": dict|None, "refused": str|None}
                               (preflight collects refusals with the other problems)
gpufleet.core.gpus_from_lspci  text of `lspci -nn -d 10de:` -> list of GPU dicts
gpufleet.core.el_target        (distribution, major, arch[, release]) -> EL classification
gpufleet.core.nvidia_driver_choice  plan + EL major + overrides -> stream / packages
gpufleet.core.preflight_problems    observations -> list of messages

The planner is imported from the controller's gpufleet package (`make setup`) on first
use, so listing or linting the collection does not need it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.core.plugins.module_utils.nvidia import (
    ChoiceError,
    driver_choice,
    el_target,
    stale_versionlock_entries,
    versionlock_entries,
)
from ansible_collections.gpufleet.core.plugins.module_utils.preflight import (
    disk_rows,
    preflight_problems,
)

PLAN_FIELDS = ("torch", "variant", "os", "driver", "gpu_archs", "python")


def _planner():
    try:
        from gpufleet import plan as planmod
    except ImportError as exc:  # pragma: no cover - depends on the controller venv
        raise AnsibleFilterError(
            "gpufleet.core.plan needs the gpufleet package on the controller "
            "(run `make setup` and use .venv/bin/ansible-playbook): %s" % exc
        ) from exc
    return planmod


def _request_args(data=None, **kwargs):
    if data is None:
        args = {}
    elif isinstance(data, dict):
        args = dict(data)
    elif isinstance(data, str):
        args = {"torch": data}
    else:
        raise AnsibleFilterError(
            "gpufleet.core.plan: input must be a dict of %s or a torch version string, got %s"
            % (", ".join(PLAN_FIELDS), type(data).__name__)
        )
    args.update(kwargs)
    unknown = sorted(set(args) - set(PLAN_FIELDS))
    if unknown:
        raise AnsibleFilterError(
            "gpufleet.core.plan: unknown input(s) %s; known: %s"
            % (", ".join(unknown), ", ".join(PLAN_FIELDS))
        )
    if not args.get("torch"):
        raise AnsibleFilterError("gpufleet.core.plan: torch is required (gpufleet_torch_version)")
    # Empty strings from inventory mean "planner's choice / unknown".
    out = {k: (v if v not in ("", None) else None) for k, v in args.items()}
    archs = out.get("gpu_archs")
    if archs is None:
        out["gpu_archs"] = ()
    elif isinstance(archs, str):
        out["gpu_archs"] = tuple(a.strip() for a in archs.split(",") if a.strip())
    else:
        out["gpu_archs"] = tuple(str(a) for a in archs)
    for key in ("torch", "variant", "os", "driver", "python"):
        if out.get(key) is not None:
            out[key] = str(out[key])
    return out


def _refusals(planmod):
    """Exception types that mean 'this input cannot work' (reported, not crashed on)."""
    types = [planmod.PlanRefused, ValueError]
    try:
        from gpufleet.errors import RefusedError

        types.append(RefusedError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


def _make(args):
    planmod = _planner()
    request = planmod.PlanRequest(**args)
    return dict(planmod.make_plan(request).to_dict())


def plan(data=None, **kwargs):
    args = _request_args(data, **kwargs)
    planmod = _planner()
    try:
        return _make(args)
    except _refusals(planmod) as exc:
        # the planner's paragraph, verbatim and without a chained traceback
        raise AnsibleFilterError(str(exc)) from None


def plan_check(data=None, **kwargs):
    args = _request_args(data, **kwargs)
    planmod = _planner()
    try:
        return {"plan": _make(args), "refused": None}
    except _refusals(planmod) as exc:
        return {"plan": None, "refused": str(exc)}


def _device_dict(dev):
    if hasattr(dev, "to_dict"):
        return dict(dev.to_dict())
    return {k: getattr(dev, k, None) for k in ("pci", "name", "codename", "arch", "family")}


def gpus_from_lspci(text):
    try:
        from gpufleet.gpuarch import parse_lspci
    except ImportError as exc:  # pragma: no cover
        raise AnsibleFilterError("gpufleet.core.gpus_from_lspci needs gpufleet: %s" % exc) from exc
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t) for t in text)
    return [_device_dict(d) for d in parse_lspci(str(text or ""))]


def el_target_filter(distribution, major, arch, release=""):
    return el_target(distribution, major, arch, release)


def nvidia_driver_choice(
    plan_dict,
    el_major,
    flavor="",
    branch="",
    packaging="dkms",
    compute_only=False,
    packages=None,
    errors="strict",
):
    """errors='strict' raises AnsibleFilterError; errors='return' returns {'error': {...}}."""
    try:
        return driver_choice(
            plan_dict,
            el_major,
            flavor=flavor,
            branch=branch,
            packaging=packaging,
            compute_only=compute_only,
            packages=packages or None,
        )
    except ChoiceError as exc:
        if errors == "return":
            return {"error": {"variable": exc.variable, "message": exc.message}}
        raise AnsibleFilterError("%s: %s" % (exc.variable, exc.message)) from None


def preflight_problems_filter(obs):
    return preflight_problems(obs)


class FilterModule:
    def filters(self):
        return {
            "plan": plan,
            "plan_check": plan_check,
            "gpus_from_lspci": gpus_from_lspci,
            "el_target": el_target_filter,
            "nvidia_driver_choice": nvidia_driver_choice,
            "preflight_problems": preflight_problems_filter,
            "preflight_disks": disk_rows,
            "nvidia_versionlock_entries": versionlock_entries,
            "nvidia_stale_versionlock_entries": stale_versionlock_entries,
        }
