"""Filters through which the roles reach the gpufleet planner and its decisions.

gpufleet.core.plan_check       inputs (dict and/or kwargs) -> {"plan": dict|None,
                               "refused": str|None}; the refusal is the planner's paragraph verbatim
                               (preflight collects refusals with the other problems)
gpufleet.core.gpus_from_lspci  text of `lspci -nn -d 10de:` -> list of GPU dicts
gpufleet.core.el_target        (distribution, major, arch[, release]) -> EL classification
gpufleet.core.nvidia_driver_choice  plan + EL major + overrides -> stream / packages
gpufleet.core.preflight_problems    observations -> list of messages
gpufleet.core.repo_file             (id, baseurl[, gpgkey]) -> a dnf repository file, its
                                    credentials as username=/password= (write it 0600)
gpufleet.core.dcgm_packages         (DCGM major, plan CUDA) -> DCGM package names

Thin adapters: every table and rule lives in the gpufleet package of the controller venv
(`make setup`): gpufleet.planning.planner, gpufleet.planning.osinfo, gpufleet.planning.gpuarch,
gpufleet.planning.driver_choice and
gpufleet.provisioning.preflight_probe. The package is imported on first use, so listing or linting
the
collection does not need it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import gpufleet_required

if TYPE_CHECKING:  # annotations only: the package is imported by the functions below
    from gpufleet.planning.planner import PlanRequest


def _request(data: object = None, **kwargs: Any) -> PlanRequest:
    """One PlanRequest from the filter's input (PlanRequest.from_mapping normalises it)."""
    with gpufleet_required():
        from gpufleet.errors import RefusedError
        from gpufleet.planning import planner as planmod
    if data is None:
        data = {}
    elif isinstance(data, str):
        data = {"torch": data}
    if not isinstance(data, Mapping):
        raise AnsibleFilterError(
            "gpufleet.core.plan_check: input must be a dict of %s or a torch version string, got %s"
            % (", ".join(planmod.REQUEST_FIELDS), type(data).__name__)
        )
    try:
        return planmod.PlanRequest.from_mapping({**data, **kwargs})
    except RefusedError as exc:
        raise AnsibleFilterError("gpufleet.core.plan_check: %s" % exc) from None


def _make(request: PlanRequest) -> dict[str, Any]:
    with gpufleet_required():
        from gpufleet.planning import planner as planmod
    return dict(planmod.make_plan(request).to_dict())


def _refusals() -> tuple[type[BaseException], ...]:
    """Exception types that mean 'this input cannot work' (reported, not crashed on)."""
    with gpufleet_required():
        from gpufleet.errors import RefusedError
    return (RefusedError, ValueError)


def plan_check(data: object = None, **kwargs: Any) -> dict[str, Any]:
    request = _request(data, **kwargs)
    try:
        return {"plan": _make(request), "refused": None}
    except _refusals() as exc:
        return {"plan": None, "refused": str(exc)}


def gpus_from_lspci(text: object) -> list[dict[str, object]]:
    with gpufleet_required():
        from gpufleet.planning import gpuarch
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(t) for t in text)
    return [d.to_dict() for d in gpuarch.parse_lspci(str(text or ""))]


def el_target_filter(
    distribution: object, major: object, arch: object, release: object = ""
) -> dict[str, Any]:
    with gpufleet_required():
        from gpufleet.planning import osinfo
    return osinfo.el_target(distribution, major, arch, release)


def nvidia_driver_choice(
    plan_dict: Mapping[str, Any],
    el_major: int | str,
    flavor: str = "",
    branch: str = "",
    packaging: str = "dkms",
    compute_only: bool = False,
    packages: Sequence[str] | None = None,
    errors: str = "strict",
) -> dict[str, Any]:
    """errors='strict' raises AnsibleFilterError; errors='return' returns {'error': {...}}."""
    with gpufleet_required():
        from gpufleet.planning import driver_choice as dc
    try:
        result = dc.driver_choice(
            plan_dict,
            el_major,
            flavor=flavor,
            branch=branch,
            packaging=packaging,
            compute_only=compute_only,
            packages=packages or None,
        )
    except dc.ChoiceError as exc:
        if errors == "return":
            return {"error": {"variable": exc.variable, "message": exc.message}}
        raise AnsibleFilterError("%s: %s" % (exc.variable, exc.message)) from None
    except ValueError as exc:  # not a plan (Plan.from_dict)
        raise AnsibleFilterError("gpufleet.core.nvidia_driver_choice: %s" % exc) from None
    return result


def preflight_problems(obs: Mapping[str, Any]) -> list[str]:
    with gpufleet_required():
        from gpufleet.provisioning import preflight_probe as preflight
    return preflight.preflight_problems(obs)


def repo_file(repo_id: str, baseurl: str, gpgkey: str = "") -> str:
    with gpufleet_required():
        from gpufleet.provisioning import preflight_probe as preflight
    return preflight.probe_repo_file(repo_id, baseurl, gpgkey)


def nvidia_versionlock_entries(choice: Mapping[str, Any], installed: str | list[str]) -> list[str]:
    with gpufleet_required():
        from gpufleet.planning import driver_choice as dc
    return dc.versionlock_entries(choice, installed)


def nvidia_stale_versionlock_entries(
    locklist: str | list[str], branch: str, wanted: Sequence[str] | None = None
) -> list[str]:
    with gpufleet_required():
        from gpufleet.planning import driver_choice as dc
    return dc.stale_versionlock_entries(locklist, branch, wanted)


def dcgm_packages(major: int | str, cuda: str | None) -> list[str]:
    with gpufleet_required():
        from gpufleet.node import dcgm
    return dcgm.packages(major, cuda)


def nvidia_smi_problems(
    csv_text: str, node: str, module_version: str = "", branch: Any = "", min_driver: Any = ""
) -> list[str]:
    """``smi.stdout | gpufleet.core.nvidia_smi_problems(node, modinfo version, branch,
    min_driver)`` -> one message per mismatch (gpufleet.provisioning.driver_smi)."""
    with gpufleet_required():
        from gpufleet.provisioning import driver_smi
    return driver_smi.problems(
        str(node), str(csv_text or ""), module_version=str(module_version or ""),
        branch=str(branch or ""), min_driver=str(min_driver or ""),
    )  # fmt: skip


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "plan_check": plan_check,
            "gpus_from_lspci": gpus_from_lspci,
            "el_target": el_target_filter,
            "nvidia_driver_choice": nvidia_driver_choice,
            "preflight_problems": preflight_problems,
            "repo_file": repo_file,
            "nvidia_versionlock_entries": nvidia_versionlock_entries,
            "nvidia_stale_versionlock_entries": nvidia_stale_versionlock_entries,
            "dcgm_packages": dcgm_packages,
            "nvidia_smi_problems": nvidia_smi_problems,
        }
