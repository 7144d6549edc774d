"""Controller side of gpufleet.core.converge_state: the role's inputs digest.

The module (plugins/modules/converge_state.py) runs on the node and compares stamps; this
action computes the digest it compares, from the task's variables (every ``<role>_*`` and
``gpufleet_*`` variable, templated), a few facts, the role's extra ``inputs``, and the
content of the role's directory, the collection's plugins, the gpufleet package and any
``input_files`` (gpufleet.provisioning.converge_digest.inputs_digest). With state=record the
check's digest is
passed back in ``digest``, so the stamp holds exactly what the check compared.

The survey (docs/performance.md): provision.yml's provisioning play starts with one
``state: survey`` per node, which observes every stamp's recorded watch list in one module
run; the action gives it a nonce. A role's ``state: check`` given that result as ``survey``
is then answered here, on the controller, when the survey found the role's stamp with the
digest just computed, the same watch list and no drift, and the survey is not *spent*. It is
spent on a node as soon as a check there says "run in full" (the check records the nonce as
the fact ``__gpufleet_converge_spent``): a full run may change what later roles watch, so
they check on the node again. ``state: settle`` skips its node call the same way when the
survey found every stamp holding the rpm database as it is. Any other case runs the
module as before.

``check_inputs: true`` (the gated roles' gate, their first task) checks the role's variables
against its check_inputs entry point first, as gpufleet.core.check_inputs does, unless
check_inventory.yml did so in this run: one task per role and node where an include of
check_inputs.yml, skipped in every playbook run, stood before.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import gpufleet_required_by
from ansible_collections.gpufleet.core.plugins.plugin_utils.inputs import RoleInputs

_PLUGINS_DIR = Path(__file__).resolve().parents[1]
_MODULE = "gpufleet.core.converge_state"
#: the host fact naming the survey that a full run on the node made stale
SPENT_FACT = "__gpufleet_converge_spent"


def _plain(value: Any) -> Any:
    """JSON's view of a value (a templated watch list and one read back from a stamp compare
    equal when they say the same)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def fresh_survey(survey: Any, task_vars: dict[str, Any]) -> dict[str, Any] | None:
    """The survey's answer (``roles``, ``settled``, ``nonce``) when it is this run's, came
    back from the node and is not spent on this host; else None."""
    if not isinstance(survey, dict) or survey.get("failed") or survey.get("skipped"):
        return None
    body = survey.get("survey")
    if not isinstance(body, dict) or not body.get("nonce"):
        return None
    spent = (task_vars.get("ansible_facts") or {}).get(SPENT_FACT)
    return None if spent == body["nonce"] else body


def surveyed_check(
    body: dict[str, Any] | None, role: str, digest: str, watch: Any
) -> dict[str, Any] | None:
    """The check's result from the survey when it says converged; None to ask the node."""
    entry = (body or {}).get("roles", {}).get(role)
    if not isinstance(entry, dict) or entry.get("converged") is not True:
        return None
    if entry.get("digest") != digest or _plain(entry.get("watch")) != _plain(watch or {}):
        return None
    return {
        "changed": False,
        "converged": True,
        "reason": "",
        "exports": entry.get("exports") or {},
        "digest": digest,
        "surveyed": True,
    }


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
            "survey",
            "check_inputs",
        }
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        role = str(args.get("role", ""))
        # the role's variables first, before the node is looked at, unless check_inventory.yml
        # checked them in this run (playbooks/tasks/check_node.yml)
        checked = task_vars.get("__gpufleet_inputs_checked") or []
        if (
            boolean(args.pop("check_inputs", False))
            and args.get("state") == "check"
            and role not in checked
        ):
            _, problems = RoleInputs(_MODULE, self._loader, self._templar).check([role], task_vars)
            if problems:
                result.update(failed=True, msg="\n".join(problems), problems=problems)
                return result
        with gpufleet_required_by(_MODULE):
            from gpufleet.provisioning.converge_digest import inputs_digest, relevant_names
        if args.get("state") in ("check", "record") and not args.get("digest"):
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
        state = args.get("state")
        body = fresh_survey(args.pop("survey", None), task_vars)
        if state == "check" and body is not None and boolean(args.get("enabled", True)):
            answer = surveyed_check(body, role, str(args["digest"]), args.get("watch"))
            if answer is not None:
                result.update(answer)
                return result
        if state == "settle" and body is not None and body.get("settled") is True:
            result.update({"changed": False, "settled": [], "surveyed": True})
            return result
        if state == "check":
            args.pop("exports", None)
        result.update(
            self._execute_module(module_name=_MODULE, module_args=args, task_vars=task_vars)
        )
        if state == "survey" and isinstance(result.get("survey"), dict):
            result["survey"]["nonce"] = uuid.uuid4().hex
        if state == "check" and body is not None and result.get("converged") is False:
            # this role runs in full now: what later roles watch may change
            result["ansible_facts"] = {SPENT_FACT: body["nonce"]}
        return result

    def _value(self, task_vars: dict[str, Any], name: str) -> Any:
        """The variable as the role sees it (templated); an error text when it cannot be
        templated, so that the digest still changes with it."""
        try:
            return self._templar.template(task_vars[name])
        except Exception as exc:  # any templating error: its text joins the digest
            return f"<cannot template: {type(exc).__name__}: {exc}>"
