#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: converge_state
short_description: Skip a role on a node that is as the role's last full run left it
version_added: "0.2.0"
description:
  - The converged fast path of the gpufleet roles (docs/performance.md). With
    O(state=check) it says whether the role can be skipped on this node; with
    O(state=record), at the end of a full run, it writes the role's stamp.
  - The skip needs both the same O(digest) (computed on the controller by this module's
    action plugin from the role's variables, the plan, a few facts, the role's files, the
    collection's plugins and the gpufleet package) and the same observation of the
    O(watch) list on the node. A check that does not pass removes the stamp, so that only a
    full run that ends writes a new one.
  - With O(state=settle), at the end of a provisioning run that succeeded on the node,
    every stamp's rpm database identity is set to the database as the run leaves it (later
    roles of the same run install packages too; those are not drift).
  - With O(state=survey), at the start of the provisioning play, it makes every role's
    node-side check at once, from the watch lists the stamps recorded, and changes
    nothing. The action plugin then answers a role's O(state=check) from the survey
    without a node call when the survey found that role's stamp with the same digest and
    watch list and no drift, and no role has run in full on the node since the survey;
    otherwise the check runs on the node as without a survey.
  - The stamp is gpufleet's own bookkeeping (mode 0600 under O(stamp_dir)), not a change to
    the node's configuration: neither writing nor removing it reports C(changed) (the
    C(written) return value says whether a record wrote one), so a rerun's recap counts
    only real changes.
options:
  role:
    description:
      - The role's name (letters, digits, underscores); the stamp is C(<role>.json).
      - Required with O(state=check) and O(state=record).
    type: str
  state:
    description:
      - C(check) before the role, C(record) after a full run of it, C(settle) at the end of
        the provisioning run, C(survey) at its start.
    type: str
    choices: [check, record, settle, survey]
    required: true
  digest:
    description: The inputs digest. Set by the action plugin; not for playbooks.
    type: str
  watch:
    description:
      - What the role leaves on the node. C(files) (paths or globs; content, mode, owner).
      - C(paths) (paths; type, mode, owner, a link's target).
      - C(listings) (globs; for each matching directory the sorted names of its entries: a
        venv's site-packages shows every package version as a dist-info entry).
      - C(json_keys) (a list of C(path), C(keys): top-level keys of a JSON file).
      - C(services) (systemd units; is-enabled and is-active).
      - C(commands) (name -> argv; exit code and a digest of stdout).
      - C(rpmdb) (bool, default true; the rpm database's identity, which any rpm
        transaction changes).
    type: dict
    default: {}
  exports:
    description:
      - With O(state=record), values the role set that later roles and plays read; a
        passing check returns them.
    type: dict
    default: {}
  enabled:
    description: False makes every check fail (a full run; C(gpufleet_converge_fast=false)).
    type: bool
    default: true
  stamp_dir:
    description: Where the stamps live on the node.
    type: path
    default: /var/lib/gpufleet/converge
  check_inputs:
    description:
      - With O(state=check), check the role's variables against its C(check_inputs) entry
        point first (argument spec and value checks, as M(gpufleet.core.check_inputs) does),
        on the controller and before the node is looked at; skipped where
        C(playbooks/check_inventory.yml) checked the role in this run. Never sent to the node.
    type: bool
    default: false
  survey:
    description:
      - With O(state=check) and O(state=settle), the registered result of this play's
        O(state=survey) task (or V({}) without one). Read by the action plugin on the
        controller; never sent to the node.
    type: dict
    default: {}
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Skip the role when the node is as its last full run left it
  gpufleet.core.converge_state:
    role: cluster_network
    state: check
    watch:
      files: [/etc/gpufleet/nccl.env]
      services: [firewalld.service]
  register: __cluster_network_gate
"""

RETURN = r"""
converged:
  description: True when the role can be skipped (state=check).
  type: bool
  returned: always
reason:
  description: Why the role runs in full (empty when converged).
  type: str
  returned: always
exports:
  description: The values recorded with the stamp (a passing check); {} otherwise.
  type: dict
  returned: always
settled:
  description: With state=settle, the roles whose stamp got the new rpm database identity.
  type: list
  elements: str
  returned: when state=settle
survey:
  description:
    - With state=survey, C(roles) (per stamp with a watch list: C(digest), C(watch),
      C(converged), C(reason), C(exports)), C(settled) (every stamp holds the rpm database
      as it is now) and C(nonce) (set by the action plugin; identifies this survey).
  type: dict
  returned: when state=survey
surveyed:
  description: With state=check and state=settle, true when the survey answered (no node call).
  type: bool
  returned: when state=check or state=settle
written:
  description: With state=record, whether the stamp's content changed (written outside check mode).
  type: bool
  returned: when state=record
digest:
  description: The inputs digest this check or record used; pass it to state=record.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.core.plugins.module_utils.converge import (
    check,
    record,
    settle,
    survey,
)


def main():  # type: () -> None
    module = AnsibleModule(
        argument_spec=dict(
            role=dict(type="str"),
            state=dict(type="str", required=True, choices=["check", "record", "settle", "survey"]),
            digest=dict(type="str"),
            watch=dict(type="dict", default={}),
            exports=dict(type="dict", default={}),
            enabled=dict(type="bool", default=True),
            stamp_dir=dict(type="path", default="/var/lib/gpufleet/converge"),
        ),
        required_if=[
            ("state", "check", ["role", "digest"]),
            ("state", "record", ["role", "digest"]),
        ],
        supports_check_mode=True,
    )
    p = module.params

    def runner(argv):  # type: (list[str]) -> tuple[int, str, str]
        # a command that is missing raises OSError (observed as such), not fail_json
        rc, out, err = module.run_command(argv, handle_exceptions=False)
        return int(rc), str(out), str(err)

    try:
        if p["state"] == "survey":
            module.exit_json(changed=False, survey=survey(p["stamp_dir"], runner))
        if p["state"] == "settle":
            settled = settle(p["stamp_dir"], runner, write=not module.check_mode)
            module.exit_json(changed=False, settled=settled)
        if p["state"] == "check":
            if p["enabled"]:
                res = check(
                    p["stamp_dir"],
                    p["role"],
                    p["digest"],
                    p["watch"],
                    runner,
                    remove=not module.check_mode,
                )
            else:
                res = dict(
                    converged=False,
                    reason="fast path off (gpufleet_converge_fast: false): full run",
                    exports={},
                )
            module.exit_json(
                changed=False,
                converged=res["converged"],
                reason=res["reason"],
                exports=res["exports"],
                digest=p["digest"],
            )
        written = record(
            p["stamp_dir"],
            p["role"],
            p["digest"],
            p["watch"],
            p["exports"],
            runner,
            write=not module.check_mode,
        )
        module.exit_json(
            changed=False,
            written=written,
            converged=True,
            reason="",
            exports=p["exports"],
            digest=p["digest"],
        )
    except (ValueError, OSError) as exc:
        module.fail_json(
            msg="%s: converge_state %s failed: %s. What to do: fix the role's watch list or "
            "the stamp directory %s, or run with -e gpufleet_converge_fast=false"
            % (p["role"], p["state"], exc, p["stamp_dir"])
        )


if __name__ == "__main__":
    main()
