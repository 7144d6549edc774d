#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fetch_results
short_description: Fetch a node's verify result files in one round trip
version_added: "0.3.0"
description:
  - Runs C(python -m gpufleet.verify.result_pack pack) on the node as one command (no module run,
    no per-file copy) and writes the files it returns into O(dest) on the controller.
  - The controller checks every file of the answer again. Only regular files with plain
    names that O(patterns) select (and O(excludes) do not), each at most 64 MiB, are
    written; the others are named in a warning.
  - With O(lock) and O(run_id) the same command gives the node's verify lock back, only if
    its owner file names O(run_id).
  - This is an action plugin; this file holds its documentation only.
extends_documentation_fragment:
  - gpufleet.core.node_python
options:
  run_dir:
    description: The node's run directory; only its top level is read, links never followed.
    type: str
    required: true
  dest:
    description: The controller folder to write the files into (created).
    type: path
    required: true
  patterns:
    description: fnmatch patterns of the file names to fetch.
    type: list
    elements: str
    required: true
  excludes:
    description: fnmatch patterns of file names to leave on the node.
    type: list
    elements: str
    default: []
  lock:
    description: The node's verify lock directory, given back after packing.
    type: str
  run_id:
    description: The run whose lock O(lock) may remove.
    type: str
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Fetch the results and give the lock back
  gpufleet.core.fetch_results:
    python: /opt/gpufleet/env/bin/python
    run_dir: /var/lib/gpufleet/verify/RUN/node1
    dest: reports/RUN/node1/
    patterns: ["*.json", "*.xml", "*.log"]
    lock: /var/lib/gpufleet/verify/.lock.node1
    run_id: RUN
"""

RETURN = r"""
files:
  description: The file names written into O(dest).
  returned: success
  type: list
  elements: str
skipped:
  description: Files the node left out (not a regular file, too large, unreadable) and why.
  returned: success
  type: list
  elements: dict
refused:
  description: Files in the answer that the controller did not write, and why.
  returned: success
  type: list
  elements: dict
released:
  description: Whether the node's verify lock was this run's and is now removed.
  returned: success
  type: bool
"""
