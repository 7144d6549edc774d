#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache-2.0

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_job
short_description: Start a detached job on a node, or wait for it, in one command each
version_added: "0.3.0"
description:
  - O(state=start) runs O(argv) on the node in a session and process group of its own,
    detached from the connection (stdin /dev/null, stdout and stderr into
    C(O(dir)/O(name).out) and C(.err)), records its PID (= its process group) in
    C(O(name).pid) and its exit status in C(O(name).rc) when it ends. Every node of a play
    starts at once, whatever the forks, as with C(async) and C(poll=0).
  - O(state=wait) first creates C(O(name).waited) in O(dir) (under the linear strategy every
    node's job was started by then), then waits until the job wrote its exit status, at most
    O(max_wait) seconds (then its process group is stopped: SIGTERM, SIGKILL 3 s later),
    stops what is left of the job's group and of the groups O(pidfiles) name, and returns
    the exit status and the job's output. It never fails by itself; a job that did not
    start, was killed or timed out has C(rc) -1 and says so in C(msg).
  - One plain shell command per start and per wait (no module payload, no async wrapper;
    the scripts are in the gpufleet package, gpufleet.verify.detached_job).
  - This is an action plugin; this file holds its documentation only.
options:
  state:
    description: Start the job or wait for it.
    type: str
    choices: [start, wait]
    required: true
  dir:
    description: The directory on the node for the job's files.
    type: str
    required: true
  name:
    description: The job's name, a plain file name; one job per name and directory.
    type: str
    required: true
  argv:
    description: The command and its arguments (O(state=start)).
    type: list
    elements: str
  max_wait:
    description: Seconds O(state=wait) waits before it stops the job.
    type: int
  pidfiles:
    description: Files on the node that each hold the PGID of another process group the
      job started (torchrun's, as gpufleet.verify.workers.supervise records it), cleaned up after
      the job.
    type: list
    elements: str
    default: []
  ready_file:
    description: With O(state=start), a file on the node the job creates once it is ready
      (the pre-check mesh: its listeners bound); the start returns only once it exists, the
      job ended or O(ready_wait) seconds passed, so that the next task begins with every
      node's job ready.
    type: str
  ready_wait:
    description: Seconds the start waits for O(ready_file).
    type: int
    default: 60
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Start torchrun on every node at once
  gpufleet.core.node_job:
    state: start
    dir: /var/lib/gpufleet/verify/RUN/node1/.jobs
    name: allreduce
    argv: [/opt/gpufleet/env/bin/python, -m, gpufleet.verify.workers.supervise, --timeout, "300",
    --, ...]

- name: Wait for it
  gpufleet.core.node_job:
    state: wait
    dir: /var/lib/gpufleet/verify/RUN/node1/.jobs
    name: allreduce
    max_wait: 360
    pidfiles: [/var/lib/gpufleet/verify/RUN/node1/allreduce.pid]
  register: job
"""

RETURN = r"""
pid:
  description: The job's PID and process group (O(state=start)).
  returned: state is start
  type: int
started_at:
  description: When the start returned, in seconds since the epoch by the node's clock
    (verify compares the nodes' to know how far apart the starts landed); null if the node
    printed none.
  returned: state is start
  type: int
ready:
  description: Whether the job created O(ready_file) before the start returned; null without
    O(ready_file).
  returned: state is start
  type: bool
rc:
  description: The job's exit status; -1 when it left none.
  returned: state is wait
  type: int
finished:
  description: 1 when the job wrote its exit status, else 0.
  returned: state is wait
  type: int
state:
  description: done, timeout, lost (ended without an exit status) or never-started.
  returned: state is wait
  type: str
stdout:
  description: The job's stdout (its last 256 KiB).
  returned: state is wait
  type: str
stderr:
  description: The job's stderr (its last 256 KiB).
  returned: state is wait
  type: str
killed:
  description: The process groups the wait had to stop.
  returned: state is wait
  type: list
  elements: int
"""
