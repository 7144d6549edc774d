#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sync_suites
short_description: Put verify's node suites on a node in one command, only when they changed
version_added: "0.3.0"
description:
  - Packs the directories O(names) under O(src) on the controller (regular files only, no
    caches or byte code) into one gzipped tar with a digest of names, modes and contents.
  - Runs C(python -m gpufleet.verify.suite_sync install) on the node once, the tar on stdin. When
    O(dest) already holds that digest nothing is written; otherwise each suite directory is
    replaced whole and the digest is written last.
  - The node refuses any member that is not a regular file or directory under one of
    O(names) (absolute paths, C(..), links).
  - This is an action plugin; this file holds its documentation only.
extends_documentation_fragment:
  - gpufleet.core.node_python
options:
  src:
    description: The controller directory that holds the suites.
    type: path
    required: true
  names:
    description: The suite directories to put on the node.
    type: list
    elements: str
    required: true
  dest:
    description: The node directory to hold them.
    type: str
    required: true
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Put the suites on the node
  gpufleet.core.sync_suites:
    python: /opt/gpufleet/env/bin/python
    src: /home/admin/gpufleet
    names: [checks, smoke_tests]
    dest: /var/lib/gpufleet/suites
"""

RETURN = r"""
digest:
  description: The digest of the suites as packed.
  returned: success
  type: str
"""
