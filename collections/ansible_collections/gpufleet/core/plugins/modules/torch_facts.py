#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: torch_facts
short_description: Read what an env's torch is and judge it against the planned torch step
version_added: "0.4.0"
description:
  - Runs gpufleet's torch facts script (gpufleet.provisioning.torch_probe) with the env's
    interpreter in one command: torch's metadata version, C(torch/version.py) (version, CUDA)
    and, with O(import), what torch reports after C(import torch) (version, CUDA, NCCL).
  - Judges the answer against O(install) by the release and the CUDA (and NCCL) the build
    reports, never by the version label alone, so PyPI's unlabelled wheel and the PyTorch
    index's labelled one of the same variant are the same build.
  - For a wheelhouse source whose pin is not known yet, lists the torch wheels of the
    find-links (sent on stdin) and chooses the pin; a wheelhouse without the build fails.
  - This is an action plugin; this file holds its documentation only.
options:
  python:
    description: The env's interpreter (it may not exist yet).
    type: str
    required: true
  node_python:
    description: The interpreter that runs the script where the env has none.
    type: str
    default: /usr/bin/python3
  install:
    description: The torch step, as the filter gpufleet.core.torch_install returns it.
    type: dict
    required: true
  settings:
    description: The source settings (source, index_url, find_links, index_root).
    type: dict
    default: {}
  python_version:
    description: The env's planned Python X.Y.
    type: str
    required: true
  import:
    description: Also import torch and read what it reports (after the install).
    type: bool
    default: false
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Read the env's torch
  gpufleet.core.torch_facts:
    python: /opt/gpufleet/env/bin/python
    install: "{{ __torch_env_step }}"
    python_version: "3.11"
  register: __torch_env_facts
"""

RETURN = r"""
found:
  description: What the env holds (python, dist, version, cuda; after an import also nccl).
  returned: success
  type: dict
problems:
  description: One line per difference from the planned build ([] = it is the build).
  returned: success
  type: list
  elements: str
converged:
  description: True when problems is empty.
  returned: success
  type: bool
install:
  description: The torch step with its pin (a wheelhouse's pin chosen from what it holds).
  returned: success
  type: dict
"""
