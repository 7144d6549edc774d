"""gpufleet.core.forkgc: the main process's objects are frozen out of the garbage collector at
each task start (before Ansible forks that task's workers), cycles that became garbage are
still collected every EVERY task starts, and the callback is on in ansible.cfg."""

from __future__ import annotations

import configparser
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.callback import forkgc  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


class Node:
    """An object that can sit in a reference cycle and be watched with a weakref."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    """A two-object cycle nothing refers to: only the collector can free it."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def freezer() -> Iterator[forkgc.Freezer]:
    f = forkgc.Freezer(every=3)
    yield f
    f.close()
    assert gc.get_freeze_count() == 0


def test_objects_that_exist_at_a_task_start_are_frozen(freezer: forkgc.Freezer) -> None:
    watched = cycle()  # garbage now: the first start's collection frees it
    freezer.before_fork()
    assert watched() is None
    assert gc.get_freeze_count() > 0
    kept = [Node() for _ in range(100)]
    before = gc.get_freeze_count()
    freezer.before_fork()  # the second start: no collection, the new objects join the frozen
    assert gc.get_freeze_count() >= before + len(kept)


def test_garbage_cycles_are_collected_every_few_starts(freezer: forkgc.Freezer) -> None:
    freezer.before_fork()  # start 1 collects, then freezes
    watched = cycle()
    freezer.before_fork()  # start 2: the cycle is frozen with everything else
    gc.collect()
    assert watched() is not None, "a full collection does not walk frozen objects"
    freezer.before_fork()  # start 3: no collection yet
    assert watched() is not None
    freezer.before_fork()  # start 4 = 1 + every: unfreeze, collect, freeze
    assert watched() is None
    assert freezer.collections == 2


def test_close_gives_the_objects_back_to_the_collector() -> None:
    f = forkgc.Freezer()
    f.before_fork()
    watched = cycle()
    f.before_fork()
    f.close()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert watched() is None


def test_the_callback_is_enabled_in_ansible_cfg() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "ansible.cfg")
    enabled = [c.strip() for c in cfg["defaults"]["callbacks_enabled"].split(",")]
    assert "gpufleet.core.forkgc" in enabled
