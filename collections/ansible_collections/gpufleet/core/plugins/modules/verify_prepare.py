#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: verify_prepare
short_description: What verify needs from a node before a launch, in one step
version_added: "0.3.0"
description:
  - One shell command on the node reads the node manifest (O(manifest), base64; missing is
    fine) and creates the run directory O(run_dir) (its parent as needed; the directory
    itself must not exist, a run id names one run only).
  - Unless that failed or the manifest is broken, a second command counts the node's GPUs
    with the env python (C(python -m gpufleet.verify.workers.gpus), which first checks that the
    env has torch) under C(timeout O(timeout)): the GPUs the ranks will see, after
    C(CUDA_VISIBLE_DEVICES) of the node's environment with O(env_file) on top (exit 4 with
    one line when it names a GPU the node does not have).
  - The env python is O(python), else the manifest's C(env_python), else O(default_python).
  - It fails nothing itself; the role's tasks name each problem from the returned values.
  - This is an action plugin; this file holds its documentation only.
options:
  manifest:
    description: The node manifest written by torch_env.
    type: str
    required: true
  run_dir:
    description: The node's run directory of this verify run.
    type: str
    required: true
  python:
    description: The env python to use (verify_python); empty takes the manifest's.
    type: str
    default: ""
  default_python:
    description: The env python when neither O(python) nor the manifest names one.
    type: str
    required: true
  timeout:
    description: Seconds the GPU count may take.
    type: int
    default: 120
  env_file:
    description:
      - The KEY=VALUE file the ranks get on top of the node's environment (verify_env_file);
        its C(CUDA_VISIBLE_DEVICES) decides the count. Empty, or a missing file, adds nothing.
    type: str
    default: ""
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Read the manifest, create the run directory and count the GPUs
  gpufleet.core.verify_prepare:
    manifest: /etc/gpufleet/manifest.json
    run_dir: /var/lib/gpufleet/verify/RUN/node1
    default_python: /opt/gpufleet/env/bin/python
  register: node
"""

RETURN = r"""
manifest:
  description:
    - C(data) (the manifest object, {} when missing) and C(error) (null, or what is wrong
      with the file, naming the node).
  returned: always
  type: dict
python:
  description: The env python used.
  returned: always
  type: str
run_dir_error:
  description: Empty when the run directory was created, else the error.
  returned: always
  type: str
gpus:
  description:
    - C(rc), C(stdout) (the GPU count) and C(stderr) of the count; C(rc) null when it did
      not run.
  returned: always
  type: dict
"""
