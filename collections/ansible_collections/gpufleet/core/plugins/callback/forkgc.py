"""Freeze the main process's objects out of the garbage collector before each task's workers fork.

ansible-playbook forks one worker per host and task. A worker inherits the main process's
heap, and the first garbage collection of its own that reaches the oldest generation walks
every object it inherited: CPU for the walk, and a private copy of every page it touches
(a write to each object's GC header). ``gc.freeze()`` moves the objects that exist now into
a permanent generation that no collection walks, in the main process or in its forks
(Python's documentation of ``gc.freeze`` recommends it right before ``fork()``). Measured on
the 3-node testbed, a converged ``make provision`` rerun, three A/B pairs: 1.15, 1.26, 1.33
controller CPU-s per added node without it, 1.08, 1.14, 1.06 with it
(docs/measurements/controller-cpu-2026-12-06.md).

The price is that a reference cycle that becomes garbage after it was frozen is not
collected while it stays frozen. So every 25th task start this callback unfreezes, collects
once in the main process and freezes again: garbage is held back for at most 25 tasks, and
the full collection (its cost grows with the heap) runs once per 25 tasks instead of in any
worker. Counting the frozen objects to decide when would cost as much: ``gc.get_freeze_count``
walks them all.

Changes no result and prints nothing; enabled in the repository's ansible.cfg
(``callbacks_enabled``).
"""

from __future__ import annotations

import gc
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: forkgc
type: aggregate
short_description: Freeze the controller's objects out of the garbage collector before workers fork
description:
  - At the start of each task (and handler), before Ansible forks that task's workers, moves
    every object of ansible-playbook's main process into Python's permanent generation
    (C(gc.freeze)), so that no garbage collection in a worker walks the inherited heap.
  - Every 25th time, collects once in the main process first, so reference cycles that
    became garbage since are freed.
  - Changes no result and prints nothing.
  - Enabled in the repository's ansible.cfg (C(callbacks_enabled)).
requirements:
  - enabled in callbacks_enabled
"""

# A full collection in the main process every this many task starts.
EVERY = 25


class Freezer:
    """The policy, apart from Ansible: ``before_fork`` at each task start."""

    def __init__(self, every: int = EVERY) -> None:
        self.every = every
        self.starts = 0
        self.collections = 0

    def before_fork(self) -> None:
        if self.starts % self.every == 0:
            gc.unfreeze()
            gc.collect()
            self.collections += 1
        self.starts += 1
        gc.freeze()

    def close(self) -> None:
        """Give the objects back to the collector (the playbook has ended)."""
        gc.unfreeze()


class CallbackModule(CallbackBase):  # type: ignore[misc]  # ansible has no type hints
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.core.forkgc"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._freezer = Freezer()

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        self._freezer.before_fork()

    def v2_playbook_on_handler_task_start(self, task: Any) -> None:
        self._freezer.before_fork()

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._freezer.close()
