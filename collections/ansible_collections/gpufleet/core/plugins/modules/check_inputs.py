#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: check_inputs
short_description: Check a node's variables against the check_inputs entry point of roles
version_added: "0.4.0"
description:
  - For each role of O(roles), on the controller and without a connection to the node, the
    node's variables as that role sees them (its defaults and those of its dependencies,
    overridden by the inventory, play and task variables) are checked against the role's
    C(check_inputs) argument spec with Ansible's own validator, then against the value checks
    of C(gpufleet.inputs.role_inputs) (the input boundary, the versions and the planner for
    preflight, the network for cluster_network).
  - Every problem of every role is reported in one failure, one line each, naming the node,
    the variable, the value and what is allowed. Nothing is changed.
  - One task per node where an C(include_role) per role and node ran before
    (playbooks/check_inventory.yml); each role's C(tasks/check_inputs.yml) runs it for the
    role alone.
  - This is an action plugin; this file holds its documentation only.
options:
  roles:
    description: The roles whose check_inputs entry point to check, in order.
    type: list
    elements: str
    required: true
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Check this node's variables for the provisioning roles
  gpufleet.core.check_inputs:
    roles: [python_bootstrap, preflight, torch_env]
"""

RETURN = r"""
checked:
  description: The roles checked (the argument specs checked first, dependencies included).
  returned: always
  type: list
  elements: str
problems:
  description: One line per problem (empty on success).
  returned: always
  type: list
  elements: str
"""
