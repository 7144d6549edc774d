"""node_reboot filters: what a rolling reboot does with a node before and after its reboot,
the jobs that still hold it, and the rollout's summary.

Thin adapters over :mod:`gpufleet.provisioning.slurm_nodes` (imported from the controller
venv that ``make setup`` builds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.gpufleet.core.plugins.plugin_utils.adapt import (
    as_filters,
    gpufleet_required,
)

with gpufleet_required():
    from gpufleet.provisioning import slurm_nodes


def reboot_before(
    shown: str, host: str, node: str, rc: int, mode: str, why: str, err: str = ""
) -> dict[str, Any]:
    """``scontrol show node -o`` output | reboot_before(host, node, rc, mode, why, stderr)."""
    return slurm_nodes.before_reboot(
        host, node, str(shown or ""), int(rc), str(mode), str(why), str(err or "")
    )


def reboot_after(
    shown: str, host: str, node: str, health_rc: Any, health_out: str, checked_by: str = ""
) -> dict[str, Any]:
    """``scontrol show node -o`` output | reboot_after(host, node, health_rc, health_out,
    checked_by); health_rc none when the health pass did not run."""
    rc = None if health_rc is None or health_rc == "" else int(health_rc)
    return slurm_nodes.after_reboot(
        host, node, str(shown or ""), rc, str(health_out or ""), str(checked_by or "")
    )


def reboot_responding(shown: str) -> bool:
    """``scontrol show node -o`` output | reboot_responding: slurmd registered again."""
    return slurm_nodes.responding(str(shown or ""))


def reboot_jobs(squeue: str) -> dict[str, Any]:
    """``squeue -h -o '%i|%u|%T|%M|%j'`` output → {jobs, ids, text}."""
    jobs = slurm_nodes.parse_jobs(str(squeue or ""))
    return {"jobs": jobs, "ids": [j["id"] for j in jobs], "text": slurm_nodes.jobs_text(jobs)}


def reboot_summary(
    hosts: Sequence[str], states: Mapping[str, Mapping[str, Any]], stopped_by: str = ""
) -> dict[str, Any]:
    """The play's hosts | reboot_summary({host: {state, message}}, stopped_by)."""
    return slurm_nodes.rollout_summary(list(hosts), dict(states), stopped_by=str(stopped_by))


class FilterModule:
    """gpufleet.core node_reboot filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return as_filters(
            (reboot_before, reboot_after, reboot_responding, reboot_jobs, reboot_summary),
            (TypeError, KeyError, ValueError),
        )
