"""Shared by gpufleet.core.check_inputs and gpufleet.core.converge_state: a node's
variables checked against roles' check_inputs entry points, on the controller.

For each role: the role's defaults and those of its dependencies (``meta/main.yml``), with
the task's variables over them (inventory, play, extra and task variables win over role
defaults, as in a role), templated; Ansible's ``ArgumentSpecValidator`` on the role's
``check_inputs`` spec (a dependency's ``main`` spec, once per node); then
:func:`gpufleet.inputs.role_inputs.value_problems`. A role whose spec fails is not value-checked
(its values may not have the type the checks expect).

Every problem names the variable as the user wrote it: the task's variables (what the node,
the play or -e sets) against the role defaults tell which role variables took their default,
and a default ``{{ gpufleet_x }}`` makes the message name ``gpufleet_x``
(:func:`gpufleet.inputs.role_inputs.origins_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.gpufleet.core.plugins.plugin_utils import rolefiles
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import gpufleet_required_by


def role_dirs(playbook_dir: object = None, role_path: object = None) -> list[Path]:
    """Where role names are looked up, as Ansible does: the play's roles/, the play's
    directory, the configured roles_path, and the current role's parent; each once."""
    out: list[Path] = []
    if playbook_dir:
        out += [Path(str(playbook_dir)) / "roles", Path(str(playbook_dir))]
    out += [Path(str(p)) for p in C.DEFAULT_ROLES_PATH]
    if role_path:
        out.append(Path(str(role_path)).parent)
    return list(dict.fromkeys(out))


class RoleInputs:
    """Checks roles' variables for one action run (its loader and templar)."""

    def __init__(self, action: str, loader: Any, templar: Any) -> None:
        self._action = action
        self._loader = loader
        self._templar = templar

    def check(self, roles: list[str], task_vars: dict[str, Any]) -> tuple[list[str], list[str]]:
        """(the roles checked, dependencies first; every problem, one line each)."""
        with gpufleet_required_by(self._action):
            from gpufleet.inputs.role_inputs import value_problems
        host = str(task_vars.get("inventory_hostname", ""))
        groups = task_vars.get("groups") or {}
        dirs = role_dirs(task_vars.get("playbook_dir"), task_vars.get("role_path"))
        problems: list[str] = []
        checked: list[str] = []
        for role in roles:
            path = self._find(role, dirs)
            deps = [(d, self._find(d, dirs)) for d in self._dependencies(path)]
            for dep, dep_path in deps:
                if dep not in checked:  # a dependency's main spec, once per node
                    problems += self._resolve(dep, dep_path, [dep_path], task_vars, "main")[1]
                    checked.append(dep)
            chain = [p for _, p in deps] + [path]
            values, bad, origins = self._resolve(role, path, chain, task_vars, "check_inputs")
            problems += bad
            checked.append(role)
            if not bad:
                problems += value_problems(role, values, host, groups, origins)
        return checked, problems

    # --- roles on disk -------------------------------------------------------------------
    def _find(self, role: str, dirs: list[Path]) -> Path:
        for d in dirs:
            if (d / role / "meta").is_dir() or (d / role / "tasks").is_dir():
                return d / role
        raise AnsibleActionFail(
            f"{self._action}: role {role!r} not found in {', '.join(str(d) for d in dirs)}"
        )

    def _yaml(self, path: Path, templates: bool = False) -> Any:
        """A role file; ``templates``: its strings may be rendered (role defaults are, as
        when the role runs). Parsed once per process (plugin_utils.rolefiles); YAML that
        only Ansible's loader reads goes through it."""
        try:
            return rolefiles.load(path, templates)
        except yaml.YAMLError:
            pass
        if not templates:
            return self._loader.load_from_file(str(path))
        try:
            return self._loader.load_from_file(str(path), trusted_as_template=True)
        except TypeError:  # ansible-core before 2.19 renders every string
            return self._loader.load_from_file(str(path))

    def _dependencies(self, path: Path) -> list[str]:
        meta = self._yaml(path / "meta" / "main.yml") or {}
        out = []
        for dep in meta.get("dependencies") or []:
            name = dep.get("role", dep.get("name")) if isinstance(dep, dict) else dep
            out.append(str(name))
        return out

    def _spec(self, role: str, path: Path, entry: str) -> dict[str, Any]:
        specs = (self._yaml(path / "meta" / "argument_specs.yml") or {}).get("argument_specs")
        spec = (specs or {}).get(entry)
        if not isinstance(spec, dict):
            raise AnsibleActionFail(f"{self._action}: role {role} has no {entry!r} argument spec")
        return dict(spec.get("options") or {})

    # --- one role's variables --------------------------------------------------------------
    def _defaults(self, chain: list[Path]) -> dict[str, Any]:
        """Role defaults (dependencies first), raw."""
        merged: dict[str, Any] = {}
        for path in chain:
            merged.update(self._yaml(path / "defaults" / "main.yml", templates=True) or {})
        return merged

    def _resolve(
        self,
        role: str,
        path: Path,
        chain: list[Path],
        task_vars: dict[str, Any],
        entry: str,
    ) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
        """(the role's variables templated, the problems of its argument spec, the origins
        of the variables the user did not set)."""
        with gpufleet_required_by(self._action):
            from gpufleet.inputs.boundary import rename
            from gpufleet.inputs.role_inputs import origins_of, own_names
        host = str(task_vars.get("inventory_hostname", ""))
        spec = self._spec(role, path, entry)
        defaults = self._defaults(chain)
        variables = {**defaults, **task_vars}  # task variables win over role defaults
        templar = self._templar.copy_with_new_env(available_variables=variables)
        # the spec's names and the role's own (every name its value checks read)
        names = set(spec) | set(own_names(role, variables))
        values: dict[str, Any] = {}
        problems: list[str] = []

        for name in sorted(names):
            if name not in variables:
                continue
            try:
                values[name] = templar.template(variables[name])
            except Exception as exc:  # any templating error names the variable
                problems.append(f"{host}: {name} cannot be templated ({role}): {exc}")

        def value_of(name: str) -> Any:
            if name in values:
                return values[name]
            try:
                return templar.template(variables[name])
            except Exception:  # shown as written when it cannot be templated
                return variables[name]

        origins = origins_of(
            defaults, task_vars, sorted(n for n in names if n in variables), value_of
        )
        if problems:
            return values, [rename(p, origins) for p in problems], origins
        checked = ArgumentSpecValidator(spec).validate(
            {n: values[n] for n in spec if n in values}, validate_role_argument_spec=True
        )
        problems += [
            f"{host}: role {role}, variables failed their argument spec ({entry}): "
            + rename(msg, origins)
            for msg in checked.error_messages
        ]
        return values, problems, origins
