#!/usr/bin/python
"""Test-only module: returns the facts it is given, so that a play on this (Debian)
controller looks like an EL node to the roles."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={"facts": {"type": "dict", "required": True}}, supports_check_mode=True
    )
    module.exit_json(changed=False, ansible_facts=module.params["facts"])


if __name__ == "__main__":
    main()
