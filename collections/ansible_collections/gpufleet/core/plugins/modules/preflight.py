#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: preflight
short_description: Probe a node read-only in one command and judge it against the gpufleet plan
version_added: "0.3.0"
description:
  - Runs one read-only command on the node (the NVIDIA devices on the PCI bus, the loaded
    driver's version, the kernel-devel package of the running kernel, Secure Boot, free
    space, the torch builds in the env and the CUDA toolkit packages installed), then asks
    the gpufleet planner for the node and judges the answer on the controller.
  - Changes nothing; runs in check mode too.
  - Fails when the probe cannot list the PCI devices or the plan request cannot be read,
    and when the node has any problem: every problem is returned in RV(problems), one
    message each naming the node, the variable and the fix, and joined (one per line) in
    the failure's C(msg).
  - This is an action plugin; this file holds its documentation only. The script and the
    rules are in the gpufleet package (gpufleet.provisioning.preflight_probe).
options:
  distribution:
    description: ansible_facts.distribution.
    type: str
  major:
    description: The EL major version (ansible_facts.distribution_major_version).
    type: int
  architecture:
    description: ansible_facts.architecture.
    type: str
  release:
    description: ansible_facts.distribution_release (marks CentOS Stream).
    type: str
  kernel:
    description: The running kernel (ansible_facts.kernel), for kernel-devel.
    type: str
  torch:
    description: The torch version to plan for.
    type: str
  variant:
    description: The CUDA variant of the wheel (cpu, cu130, ...); empty lets the planner choose.
    type: str
  python:
    description: The env's Python version.
    type: str
  gpu_archs:
    description: GPU architectures to plan for; empty takes them from the PCI bus.
    type: list
    elements: str
    default: []
  plan_installed_driver:
    description: Plan against the installed driver (always), never, or only where no
      driver is installed by gpufleet (auto).
    type: str
    default: auto
  allow_no_gpu:
    description: A node without an NVIDIA GPU is not a problem.
    type: bool
    default: false
  secure_boot_ok:
    description: Secure Boot with DKMS modules is not a problem (they are signed with an
      enrolled key).
    type: bool
    default: false
  driver_install:
    description: nvidia_driver_install.
    type: bool
    default: true
  flavor:
    description: nvidia_driver_flavor.
    type: str
  branch:
    description: nvidia_driver_branch.
    type: str
  packaging:
    description: nvidia_driver_packaging.
    type: str
    default: dkms
  compute_only:
    description: nvidia_driver_compute_only.
    type: bool
    default: false
  fabricmanager:
    description: nvidia_driver_fabricmanager (auto, always, never).
    type: str
    default: auto
  nvlsm:
    description: nvidia_driver_nvlsm (auto, always, never).
    type: str
    default: auto
  wheel_variant:
    description: torch_env_wheel_variant.
    type: str
  torch_source:
    description:
      - torch_env's source settings (source, index_url, find_links, index_root); a build the
        source cannot serve, or a wheelhouse without it, is a problem of the node.
    type: dict
    default: {}
  torch_lock:
    description: Controller path of the lock torch_env installs from ("" = none).
    type: str
    default: ""
  torch_packages:
    description: The requirements torch_env installs beside torch (a lock must pin each).
    type: list
    elements: str
    default: []
  node_python:
    description: The node's interpreter that reads a wheelhouse source's find-links.
    type: str
    default: /usr/bin/python3
  kernel_devel:
    description: Query the kernel-devel package of the running kernel.
    type: bool
    default: true
  base_repo_baseurl:
    description: A mirror for the kernel-devel query (its own repository id,
      gpufleet-base-probe); empty for the node's enabled repositories.
    type: str
  env_prefix:
    description: The env whose torch builds count as installed.
    type: str
  disks:
    description: Free-space checks, each a dict of path, required_mb and variable.
    type: list
    elements: dict
    default: []
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Probe the node and judge it against the plan
  gpufleet.core.preflight:
    distribution: "{{ ansible_facts.distribution }}"
    major: "{{ ansible_facts.distribution_major_version | int }}"
    architecture: "{{ ansible_facts.architecture }}"
    kernel: "{{ ansible_facts.kernel }}"
    torch: 2.13.0
    variant: ""
    python: "3.11"
    env_prefix: /opt/gpufleet/env
  register: node
"""

RETURN = r"""
target:
  description: The EL classification of the facts (supported, el_major, os, repo, refusals).
  returned: always
  type: dict
gpus:
  description: The NVIDIA GPUs on the PCI bus (pci, name, arch, ...).
  returned: always
  type: list
  elements: dict
nvswitches:
  description: The NVSwitches on the PCI bus.
  returned: always
  type: list
  elements: str
driver:
  description: The loaded (or installed) driver's version; empty when none.
  returned: always
  type: str
kernel_devel:
  description: installed, available, missing, error or skipped.
  returned: always
  type: str
secure_boot:
  description: enabled, disabled, unsupported or unknown.
  returned: always
  type: str
answer:
  description: The planner's answer, plan (dict or null) and refused (its paragraph or null).
  returned: always
  type: dict
choice:
  description: nvidia_driver's stream and packages for the plan; empty where no driver is
    chosen; an error dict where the settings cannot work.
  returned: always
  type: dict
fabric:
  description: What an NVSwitch node needs (Fabric Manager, NVLSM) and why.
  returned: always
  type: dict
observations:
  description: What the problems were judged from (to judge again with a Fabric Manager verdict).
  returned: always
  type: dict
problems:
  description: One message per problem.
  returned: always
  type: list
  elements: str
"""
