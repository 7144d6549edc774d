"""Which nodes a rolling run left untouched, when a failed batch stopped it.

A play with ``serial`` runs its hosts in batches. When a batch fails past the play's
``max_fail_percentage`` (or every host of a batch fails), Ansible ends the whole run: the
batches after it never start, and the plays after it (provision.yml's summary) never run.
Ansible's recap lists the hosts that ran; it does not say which were never reached. This
callback notes each batch as it starts and, at the end of the run, names the hosts of each
such play that no batch reached, with what to do.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.utils.display import Display

DOCUMENTATION = r"""
name: rollout
type: aggregate
short_description: Name the hosts a rolling (serial) play never reached
description:
  - At the end of a run, for each play whose batches stopped before every host of the play
    had its turn (a batch failed past max_fail_percentage, or all of its hosts failed), prints
    the hosts left untouched and what to do.
  - Enabled in the repository's ansible.cfg (C(callbacks_enabled)).
requirements:
  - enabled in callbacks_enabled
"""

display = Display()


def untouched(play_hosts: list[str], reached: set[str]) -> list[str]:
    """The play's hosts (in play order) that no batch reached."""
    return [h for h in play_hosts if h not in reached]


def _percent(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def message(play_name: str, left: list[str], failed: list[str], max_fail: Any) -> str:
    pct = _percent(max_fail)
    cause = (
        f"a batch failed past max_fail_percentage {pct:g} %"
        if pct is not None and pct < 100
        else "every host of a batch failed"
    )
    why = f" (failed: {', '.join(failed)})" if failed else ""
    return (
        f"ROLLOUT STOPPED in play '{play_name}': {cause}{why}. Left untouched by this run: "
        f"{', '.join(left)} -> fix the failed node(s) (their errors are above), then rerun the "
        "same command: converged nodes are skipped, the untouched ones get their turn"
    )


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet.core.rollout"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        # play uuid -> (name, all hosts of the play in order, hosts of the batches started,
        # max_fail_percentage)
        self._plays: dict[str, tuple[str, list[str], set[str], Any]] = {}

    def v2_playbook_on_play_start(self, play: Any) -> None:
        # Ansible hands callbacks no inventory; the play's variable manager holds it (a
        # private attribute of ansible-core, pinned in requirements/constraints.txt). Without
        # it the callback says nothing rather than guess.
        inventory = getattr(play.get_variable_manager(), "_inventory", None)
        if inventory is None:
            return
        # the whole play under --limit (the batch restriction lifted), then this batch
        everyone = [h.name for h in inventory.get_hosts(play.hosts, ignore_restrictions=True)]
        batch = {h.name for h in inventory.get_hosts(play.hosts)}
        uuid = str(getattr(play, "_uuid", id(play)))
        name, hosts, reached, _ = self._plays.get(uuid, (play.get_name(), everyone, set(), None))
        self._plays[uuid] = (
            name,
            hosts,
            reached | batch,
            getattr(play, "max_fail_percentage", None),
        )

    def v2_playbook_on_stats(self, stats: Any) -> None:
        failed = sorted(set(stats.failures) | set(stats.dark))
        for name, hosts, reached, max_fail in self._plays.values():
            left = untouched(hosts, reached)
            if left:
                display.warning(message(name, left, failed, max_fail))
