#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dnf_cli
short_description: Manage packages and module streams through the dnf command line
version_added: "0.1.0"
description:
  - Installs, upgrades or removes packages and enables, switches or resets dnf module
    streams by running the C(dnf) and C(rpm) commands, so it works from any Python on the
    node. ansible-core 2.17 and newer cannot use EL8's platform Python 3.6, and EL8's dnf
    Python bindings exist only for 3.6, so M(ansible.builtin.dnf) cannot manage EL8 from
    the ansible-core gpufleet pins.
  - Idempotent. The rpm database and C(dnf module list) are queried first; dnf runs only
    when a package is missing (or, for O(state=latest), when an update exists) or a stream
    differs; C(changed) is true only when the rpm database or the module state changed.
  - GPG checking is never weakened; there is deliberately no option for it.
options:
  name:
    description:
      - Package names, NEVRA / name-version globs (C(nvidia-open-580.*)), file paths or
        provide specs such as C(kernel-devel-uname-r == 4.18.0-553.el8_10.x86_64).
    type: list
    elements: str
    default: []
  state:
    description: Whether the packages are installed, installed at the newest version, or removed.
    type: str
    choices: [present, absent, latest]
    default: present
  module_stream:
    description:
      - dnf module stream, C(NAME:STREAM) (C(nvidia-driver:580-open)); C(NAME) alone for
        O(module_action=reset). Handled before the packages.
    type: str
  module_action:
    description:
      - C(enable) enables the stream and fails when another stream is enabled;
        C(switch-to) runs C(dnf module switch-to) only when another stream is enabled;
        C(reset) resets the module.
    type: str
    choices: [enable, switch-to, reset]
    default: enable
  allowerasing:
    description: Pass C(--allowerasing) (flavour switches replace conflicting kmod packages).
    type: bool
    default: false
  enablerepo:
    description: Repository ids enabled for this transaction only.
    type: list
    elements: str
    default: []
  disablerepo:
    description: Repository ids disabled for this transaction only.
    type: list
    elements: str
    default: []
  install_weak_deps:
    description: Install weak dependencies (recommends).
    type: bool
    default: true
  update_cache:
    description: Refresh the metadata (C(dnf makecache --refresh)) before acting.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - In check mode the read-only queries run and the commands that would run are returned.
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Kernel headers for the running kernel (EL8)
  gpufleet.core.dnf_cli:
    name:
      - "kernel-devel-uname-r == {{ ansible_facts.kernel }}"
      - kernel-headers

- name: Open DKMS driver, branch 580, switching flavour if another stream is enabled
  gpufleet.core.dnf_cli:
    module_stream: nvidia-driver:580-open
    module_action: switch-to
    allowerasing: true
    name: [nvidia-open]
"""

RETURN = r"""
installed:
  description: NEVRAs that appeared in the rpm database.
  returned: always
  type: list
  elements: str
removed:
  description: NEVRAs that left the rpm database.
  returned: always
  type: list
  elements: str
module_before:
  description: Enabled stream before the run (null when none or no module step).
  returned: always
  type: str
module_after:
  description: Enabled stream after the run.
  returned: always
  type: str
commands:
  description: The state-changing dnf command lines run (or, in check mode, that would run).
  returned: always
  type: list
  elements: list
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.core.plugins.module_utils.dnf_cli import (
    MODULE_ACTIONS,
    STATES,
    DnfCli,
    DnfCliError,
)


def main():
    # type: () -> None
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=list(STATES), default="present"),
            module_stream=dict(type="str"),
            module_action=dict(type="str", choices=list(MODULE_ACTIONS), default="enable"),
            allowerasing=dict(type="bool", default=False),
            enablerepo=dict(type="list", elements="str", default=[]),
            disablerepo=dict(type="list", elements="str", default=[]),
            install_weak_deps=dict(type="bool", default=True),
            update_cache=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    if not module.params["name"] and not module.params["module_stream"]:
        module.fail_json(msg="dnf_cli needs name (packages) or module_stream")
    dnf = module.get_bin_path("dnf", required=True)
    rpm = module.get_bin_path("rpm", required=True)
    env = {"LC_ALL": "C", "LANG": "C"}

    def runner(argv):
        # type: (list[str]) -> tuple[int, str, str]
        # AnsibleModule has no type hints; run_command returns (rc, stdout, stderr)
        rc, out, err = module.run_command(argv, environ_update=env, check_rc=False)
        return rc, out, err

    cli = DnfCli(runner, check_mode=module.check_mode, dnf=dnf, rpm=rpm)
    try:
        result = cli.run(module.params)
    except DnfCliError as exc:
        extra = dict(exc.extra)
        extra["commands"] = [[os.path.basename(a[0])] + list(a[1:]) for a in cli.commands]
        module.fail_json(msg=exc.msg, **extra)
    result["commands"] = [[os.path.basename(a[0])] + a[1:] for a in result["commands"]]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
