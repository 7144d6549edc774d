"""What slurmctld says of a node, and what a rolling reboot does with it (role node_reboot,
``make rolling-reboot``; docs/slurm.md, "Rolling reboots").

A node that Slurm manages is rebooted only once Slurm has stopped giving it work and its
running jobs have ended by themselves: the role drains it with a reason of its own
(``gpufleet-reboot: ...``), waits (bounded) until no job of it is left, reboots it, runs the
node health pass, and resumes it only when the pass passes. A node that fails the pass stays
drained, the failure as its reason. A node drained for any other reason (an admin's
maintenance) is left alone: not drained again, not rebooted, not resumed.

The reboot's reason prefix is not ``gpufleet:`` on purpose: the health check that slurmd
runs (``gpufleet health --slurm``) resumes a node drained with ``gpufleet:`` once its
checks pass, which would hand a node waiting for its reboot back to Slurm. To that check a
``gpufleet-reboot:`` drain is someone else's, left alone.

Facts (Slurm 22.05, scontrol(1), squeue(1)): ``scontrol show node -o NAME`` prints one line
of ``Key=Value`` pairs (``State=MIXED+DRAIN``, ``Reason=... [user@time]``) and exits non-zero
for a name slurmctld does not know; ``scontrol update nodename=N state=drain reason=R``
stops new work on N (running jobs go on: DRAINING, then DRAINED when they have ended);
``state=resume`` undoes it; ``squeue -h -w N -t RUNNING,COMPLETING,SUSPENDED,CONFIGURING``
lists the jobs that still hold N.

The role runs Slurm's commands on the node itself and hands their output to the filters of
this module (gpufleet.core.reboot_before, reboot_after), so a node without gpufleet's env
(a driver reboot during the first provisioning) is drained the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

#: Prefix of every drain reason the rolling reboot sets.
REBOOT_PREFIX = "gpufleet-reboot:"
#: Prefix of the drain reasons of gpufleet's health check (gpufleet health --slurm).
HEALTH_PREFIX = "gpufleet:"
#: Slurm keeps a reason to this many characters in practice; we stay well inside it.
REASON_MAX = 160
#: node_reboot_slurm: auto (drain where Slurm knows the node), drain (every node must be
#: Slurm's, else refused before any change), off (plain reboots, Slurm not asked)
SLURM_MODES = ("auto", "drain", "off")
#: the job states that still hold a node (squeue -t)
HOLDING_STATES = "RUNNING,COMPLETING,SUSPENDED,CONFIGURING"


def parse_show_line(text: str) -> dict[str, str]:
    """One ``scontrol show ... -o`` line → {key: value}. Values may hold spaces (Reason,
    Comment): a value runs until the next `` Key=``. A node's Reason runs to its
    ``[user@time]`` stamp, whatever it holds (someone else's reason may hold ``a=b``)."""
    out: dict[str, str] = {}
    line = text.strip().splitlines()[0] if text.strip() else ""
    reason = re.search(r"(?:^|\s)Reason=(.*?\[[^\]\s]*@[^\]\s]*\])", line)
    if reason:
        out["Reason"] = reason.group(1).strip()
        line = line[: reason.start()] + " " + line[reason.end() :]
    for m in re.finditer(
        r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(.*?)(?=\s+[A-Za-z][A-Za-z0-9_:/]*=|$)", line
    ):
        out.setdefault(m.group(1), m.group(2).strip())
    return out


def node_flags(fields: Mapping[str, str]) -> set[str]:
    """``State=IDLE+DRAIN`` → {"IDLE", "DRAIN"}; ``MIXED+DRAIN*`` (not responding) too."""
    return {f.rstrip("*~#!%$@^-") for f in fields.get("State", "").split("+") if f}


def is_drained(fields: Mapping[str, str]) -> bool:
    return bool(node_flags(fields) & {"DRAIN", "DRAINING", "DRAINED"})


def bare_reason(fields: Mapping[str, str]) -> str:
    """The node's Reason without Slurm's ``[user@time]`` stamp."""
    return re.sub(r"\s*\[[^\]\s]*@[^\]\s]*\]$", "", fields.get("Reason", "")).strip()


def clean_reason(text: str) -> str:
    """A drain reason as one bounded line: no control characters, quotes or '=' (scontrol's
    own parsing, and ours of ``show node``, split at them)."""
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", text)
    text = re.sub(r"\s+", " ", re.sub(r"['\"]", "", text).replace("=", " ")).strip()
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def drain_argv(node: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"]


def resume_argv(node: str) -> list[str]:
    return ["scontrol", "update", f"nodename={node}", "state=resume"]


@dataclass(frozen=True)
class Before:
    """What the rolling reboot does with a node before its reboot."""

    #: drain (then wait and reboot), wait (already drained by an earlier rollout: wait and
    #: reboot), skip (drained by someone else: left alone), plain (Slurm does not manage it:
    #: reboot without draining), refuse (node_reboot_slurm=drain and Slurm does not know it)
    action: str
    #: one line for the run's output and the summary
    message: str
    #: the Slurm name of the node ("" for plain)
    node: str = ""
    #: the command to run (drain); [] for none
    argv: tuple[str, ...] = ()
    #: the node's drain reason before the rollout touched it
    previous: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["argv"] = list(self.argv)
        return out


def reboot_reason(why: str) -> str:
    """The drain reason of a node waiting for its reboot: ``gpufleet-reboot: <why>``."""
    return clean_reason(f"{REBOOT_PREFIX} {why}")


def _not_slurms(rc: int, err: str) -> str:
    """Why ``scontrol show node`` says this node is not Slurm's, or "" when it does not say
    so (slurmctld could not be asked: the node may well be Slurm's)."""
    if rc == 127:
        return "no scontrol on the node"
    if rc == 126:
        return "no Slurm configuration on the node"
    low = err.lower()
    if "not found" in low and "node" in low:
        return "slurmctld does not know it"
    if "slurm.conf" in low or "configuration source" in low:
        return "no Slurm configuration on the node"
    return ""


def before_reboot(
    host: str, node: str, shown: str, rc: int, mode: str, why: str, err: str = ""
) -> dict[str, Any]:
    """Decide from ``scontrol show node -o <node>`` (its stdout, exit status and stderr;
    rc 127: no scontrol on the node, 126: no Slurm configuration there) what happens to
    ``host`` before its reboot. A node is taken for one Slurm does not manage only when
    scontrol says so (missing, no configuration, the name unknown); when slurmctld cannot be
    asked, the node is refused: rebooting it undrained could kill its jobs."""
    if mode not in SLURM_MODES:
        raise ValueError(f"node_reboot_slurm={mode!r}: allowed {', '.join(SLURM_MODES)}")
    if mode == "off":
        return Before(
            "plain", f"{host}: node_reboot_slurm=off: rebooted without asking Slurm"
        ).to_dict()
    fields = parse_show_line(shown) if rc == 0 else {}
    if rc == 0 and fields.get("NodeName", node) != node:
        rc, err = 1, f"Node {node} not found (scontrol showed {fields.get('NodeName')})"
    if rc != 0:
        why_not = _not_slurms(rc, err)
        if not why_not:
            detail = " ".join(err.split())[:200] or f"exit {rc}"
            return Before(
                "refuse",
                f"{host}: slurmctld could not be asked about {node!r} ({detail}); rebooting "
                "it undrained could kill its jobs -> bring slurmctld and munge back, or set "
                "node_reboot_slurm=off where Slurm does not manage these nodes",
                node,
            ).to_dict()
        if mode == "drain":
            return Before(
                "refuse",
                f"{host}: node_reboot_slurm=drain, but {why_not} ({node!r}) -> set "
                "gpufleet_slurm_node_name to the node's slurm.conf NodeName, or "
                "node_reboot_slurm=auto for nodes that Slurm does not manage",
                node,
            ).to_dict()
        return Before(
            "plain", f"{host}: not a Slurm node ({why_not}): rebooted without draining", node
        ).to_dict()
    previous = bare_reason(fields)
    if is_drained(fields) and previous.startswith(REBOOT_PREFIX):
        return Before(
            "wait",
            f"{host}: already drained for its reboot ({previous}): waiting for its jobs",
            node,
            previous=previous,
        ).to_dict()
    if is_drained(fields) and not previous.startswith(HEALTH_PREFIX):
        return Before(
            "skip",
            f"{host}: drained by someone else ({previous or 'no reason'}): left alone, "
            "not rebooted -> resume it in Slurm and rerun to include it",
            node,
            previous=previous,
        ).to_dict()
    reason = reboot_reason(why)
    note = f" (was drained by gpufleet's health check: {previous})" if is_drained(fields) else ""
    return Before(
        "drain",
        f"{host}: draining {node} in Slurm for its reboot{note}",
        node,
        tuple(drain_argv(node, reason)),
        previous,
    ).to_dict()


def parse_jobs(text: str) -> list[dict[str, str]]:
    """``squeue -h -o '%i|%u|%T|%M|%j'`` lines → [{id, user, state, time, name}]."""
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|", 4)
        if len(parts) == 5 and parts[0]:
            jobs.append(dict(zip(("id", "user", "state", "time", "name"), parts, strict=True)))
    return jobs


def jobs_text(jobs: Sequence[Mapping[str, str]]) -> str:
    """``job 12 (alice, train, RUNNING 0:42)``, comma-separated."""
    return ", ".join(
        f"job {j['id']} ({j['user']}, {j['name']}, {j['state']} {j['time']})" for j in jobs
    )


#: reasons slurmctld itself gives a node that went away for its reboot (slurm.conf(5),
#: ReturnToService): the rollout's own reboot, not someone else's drain
SLURM_REBOOT_REASONS = ("Node unexpectedly rebooted", "Not responding")


def responding(shown: str) -> bool:
    """slurmd on the node has registered with slurmctld: its State carries no ``*`` (not
    responding) and no NOT_RESPONDING flag."""
    state = parse_show_line(shown).get("State", "")
    return bool(state) and "*" not in state and "NOT_RESPONDING" not in state


def after_reboot(
    host: str,
    node: str,
    shown: str,
    health_rc: int | None,
    health_out: str,
    checked_by: str = "",
) -> dict[str, Any]:
    """After the reboot (``node`` "": not a Slurm node): resume the node when the health
    pass passed (``health_rc`` 0, or None when node_reboot_health is off) and it is still
    held for the rollout (its drain, or a reason slurmctld gave it for the reboot); otherwise
    drain it with the failure as its reason. An incomplete pass (rc 3: a check could not
    finish) is not a pass. ``checked_by`` names the check that passed instead of the health
    pass (a calling role's: nvidia_driver's driver check)."""
    fields = parse_show_line(shown)
    previous = bare_reason(fields)
    held = is_drained(fields) or "DOWN" in node_flags(fields)
    ours = previous.startswith(REBOOT_PREFIX) or previous.startswith(SLURM_REBOOT_REASONS)
    if health_rc not in (None, 0):
        lines = [ln.strip() for ln in health_out.splitlines() if ln.strip()]
        what = {1: "failed", 3: "incomplete"}.get(health_rc, f"exit {health_rc}")
        first = lines[0] if lines else "no output"
        reason = reboot_reason(f"health {what} after reboot: {first}")
        if not node:  # not a Slurm node: nothing to keep it from work but this message
            return {
                "action": "none",
                "ok": False,
                "argv": [],
                "message": f"{host}: the health pass after the reboot {what} ({first}) "
                "-> fix the node before it takes work, then rerun make rolling-reboot",
            }
        return {
            "action": "drain",
            "ok": False,
            "argv": drain_argv(node, reason),
            "message": f"{host}: the health pass after the reboot {what} ({first}): {node} "
            f"stays drained ({reason}) -> fix it, then `scontrol update nodename={node} "
            "state=resume` or rerun make rolling-reboot",
        }
    passed = (
        "passed the health pass"
        if health_rc == 0
        else f"passed {checked_by}"
        if checked_by
        else "back (node_reboot_health off)"
    )
    if held and not ours:
        return {
            "action": "none",
            "ok": True,
            "argv": [],
            "message": f"{host}: {passed}, but drained meanwhile by someone else "
            f"({previous or 'no reason'}): not resumed",
        }
    if held:
        return {
            "action": "resume",
            "ok": True,
            "argv": resume_argv(node),
            "message": f"{host}: {passed}; {node} resumed in Slurm",
        }
    return {"action": "none", "ok": True, "argv": [], "message": f"{host}: {passed}"}


def rollout_summary(
    hosts: Sequence[str],
    states: Mapping[str, Mapping[str, Any]],
    *,
    stopped_by: str = "",
) -> dict[str, Any]:
    """The rollout as it stands: each host's state (done, left alone, waiting, failed) from
    the facts the batches left, and the hosts no batch reached (untouched), in play order."""
    groups: dict[str, list[str]] = {
        "done": [],
        "left_alone": [],
        "waiting": [],
        "failed": [],
        "untouched": [],
    }
    notes = {}
    for host in hosts:
        st = states.get(host) or {}
        state = str(st.get("state") or "untouched")
        groups.setdefault(state, []).append(host)
        if st.get("message"):
            notes[host] = str(st["message"])
    ok = not (groups["waiting"] or groups["failed"] or stopped_by)
    # what a rerun still has to do: the nodes done (or left alone) need no second turn
    rest = groups["waiting"] + groups["failed"] + groups["untouched"]
    lines = [f"{k.replace('_', ' ')}: {', '.join(v)}" for k, v in groups.items() if v]
    text = (
        ("ROLLING REBOOT COMPLETE" if ok else "ROLLING REBOOT STOPPED") + " - " + "; ".join(lines)
    )
    if not ok and rest:
        text += (
            " -> once the waiting jobs have ended (or the failed nodes are fixed), go on without "
            f"the nodes done: make rolling-reboot ... REBOOT_ARGS='--limit {','.join(rest)}'"
        )
    return {
        **groups,
        "ok": ok,
        "rest": rest,
        "notes": notes,
        "stopped_by": stopped_by,
        "text": text,
    }
