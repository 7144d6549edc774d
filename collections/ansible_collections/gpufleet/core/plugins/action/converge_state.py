"""Controller side of gpufleet.core.converge_state: the role's inputs digest.

The module (plugins/modules/converge_state.py) runs on the node and compares stamps; this
action computes the digest it compares, from the task's variables (every ``<role>_*`` and
``gpufleet_*`` variable, templated), a few facts, the role's extra ``inputs``, and the
content of the role's directory, the collection's plugins, the gpufleet package and any
``input_files`` (gpufleet.converge.inputs_digest). With state=record the check's digest is
passed back in ``digest``, so the stamp holds exactly what the check compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import gpufleet_required_by

_PLUGINS_DIR = Path(__file__).resolve().parents[1]
_MODULE = "gpufleet.core.converge_state"


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        {
            "role",
            "state",
            "watch",
            "exports",
            "inputs",
            "input_files",
            "exclude",
            "enabled",
            "stamp_dir",
            "digest",
        }
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        role = str(args.get("role", ""))
        with gpufleet_required_by(_MODULE):
            from gpufleet.converge import inputs_digest, relevant_names
        if args.get("state") != "settle" and not args.get("digest"):
            # the role's exports (names with state=check, a dict with record) are its outputs
            exclude = [str(n) for n in (args.get("exports") or [])] + list(
                args.get("exclude") or []
            )
            try:
                names = relevant_names(task_vars, role, exclude)
            except ValueError as exc:
                raise AnsibleActionFail(str(exc)) from exc
            variables = {n: self._value(task_vars, n) for n in names}
            role_path = task_vars.get("role_path")
            if not role_path:
                raise AnsibleActionFail(f"{role}: converge_state runs inside a role (no role_path)")
            import gpufleet

            trees = {
                "role": str(role_path),
                "plugins": str(_PLUGINS_DIR),
                "gpufleet": str(Path(gpufleet.__file__).resolve().parent),
            }
            for i, f in enumerate(args.get("input_files") or []):
                trees[f"file{i}:{Path(str(f)).name}"] = str(f)
            facts = task_vars.get("ansible_facts") or {}
            args["digest"] = inputs_digest(
                role, variables, facts, dict(args.get("inputs") or {}), trees
            )
        for key in ("inputs", "input_files", "exclude"):
            args.pop(key, None)
        if args.get("state") == "check":
            args.pop("exports", None)
        result.update(
            self._execute_module(module_name=_MODULE, module_args=args, task_vars=task_vars)
        )
        return result

    def _value(self, task_vars: dict[str, Any], name: str) -> Any:
        """The variable as the role sees it (templated); an error text when it cannot be
        templated, so that the digest still changes with it."""
        try:
            return self._templar.template(task_vars[name])
        except Exception as exc:  # any templating error: its text joins the digest
            return f"<cannot template: {type(exc).__name__}: {exc}>"
