"""Controller side of gpufleet.core.check_inputs: every role's check_inputs, one task.

playbooks/check_inventory.yml used to include each role's ``check_inputs`` entry point
per node: an argument-spec task, the shared variables' spec and one or more value checks
per role, about 20 task results per node on every provision and verify run (each a worker
process on the controller). This action does the same work in one
(plugin_utils.inputs.RoleInputs, which converge_state's gates share).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.core.plugins.plugin_utils.inputs import RoleInputs

_MODULE = "gpufleet.core.check_inputs"


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible has no type hints
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"roles"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        roles = self._task.args.get("roles")
        if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
            raise AnsibleActionFail(f"{_MODULE}: roles must be a non-empty list of role names")
        checked, problems = RoleInputs(_MODULE, self._loader, self._templar).check(roles, task_vars)
        result.update({"changed": False, "checked": checked, "problems": problems})
        if problems:
            result["failed"] = True
            result["msg"] = "\n".join(problems)
        return result
