"""The rolling reboot's decisions from what slurmctld says (gpufleet.provisioning.slurm_nodes)."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.provisioning import slurm_nodes as sn

IDLE = "NodeName=node2 Arch=x86_64 CoresPerSocket=1 State=IDLE ThreadsPerCore=1"
MIXED = "NodeName=node2 State=MIXED Partitions=gpu"
ADMIN = (
    "NodeName=node3 State=IDLE+DRAIN Partitions=gpu "
    "Reason=maintenance: swap PSU a=b [root@2026-12-07T18:00:00] Comment=(null)"
)
HEALTH = "NodeName=node2 State=IDLE+DRAIN Reason=gpufleet: manifest: truncated [slurm@2026-12-07T18:00:00]"
OURS = (
    "NodeName=node2 State=MIXED+DRAIN "
    "Reason=gpufleet-reboot: rolling reboot [root@2026-12-07T18:00:00]"
)


def before(shown: str, rc: int = 0, mode: str = "auto", node: str = "node2") -> dict[str, Any]:
    return sn.before_reboot(node, node, shown, rc, mode, "rolling reboot")


def test_a_busy_node_is_drained_with_the_reboot_reason_not_the_health_checks() -> None:
    d = before(MIXED)
    assert d["action"] == "drain"
    assert d["argv"] == [
        "scontrol", "update", "nodename=node2", "state=drain",
        "reason=gpufleet-reboot: rolling reboot",
    ]  # fmt: skip
    # slurmd's health check resumes drains that start with "gpufleet:"; ours must not
    assert not d["argv"][-1].removeprefix("reason=").startswith(sn.HEALTH_PREFIX)


def test_an_admins_drain_is_left_alone_and_named_with_its_reason() -> None:
    d = before(ADMIN, node="node3")
    assert d["action"] == "skip" and d["argv"] == []
    assert "maintenance: swap PSU a=b" in d["message"] and d["previous"].startswith("maintenance")


def test_a_node_the_health_check_drained_is_rebooted_under_the_rollouts_reason() -> None:
    d = before(HEALTH)
    assert d["action"] == "drain" and "gpufleet: manifest: truncated" in d["message"]


def test_a_rerun_picks_up_the_node_an_earlier_rollout_left_waiting() -> None:
    d = before(OURS)
    assert d["action"] == "wait" and d["argv"] == []


def before_err(rc: int, err: str, mode: str = "auto") -> dict[str, Any]:
    return sn.before_reboot("node2", "node2", "", rc, mode, "rolling reboot", err)


@pytest.mark.parametrize(
    ("rc", "err", "what"),
    [
        (127, "", "no scontrol on the node"),
        (126, "no Slurm configuration on the node: no /etc/slurm/slurm.conf", "no Slurm conf"),
        (1, "Node node2 not found", "slurmctld does not know it"),
        (1, "error: s_p_parse_file: unable to status file /etc/slurm/slurm.conf", "no Slurm conf"),
        (1, "error: Could not establish a configuration source", "no Slurm configuration"),
    ],
)
def test_a_node_scontrol_calls_not_slurms_reboots_plain_under_auto_and_is_refused_under_drain(
    rc: int, err: str, what: str
) -> None:
    plain = before_err(rc, err)
    assert plain["action"] == "plain" and what in plain["message"], plain
    refused = before_err(rc, err, mode="drain")
    assert refused["action"] == "refuse" and "gpufleet_slurm_node_name" in refused["message"]


@pytest.mark.parametrize("mode", ["auto", "drain"])
def test_a_slurmctld_that_cannot_be_asked_refuses_the_node_rather_than_reboot_it_undrained(
    mode: str,
) -> None:
    err = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    d = before_err(1, err, mode)
    assert d["action"] == "refuse" and "Unable to contact slurm controller" in d["message"]
    assert "node_reboot_slurm=off" in d["message"]
    assert before_err(124, "", mode)["action"] == "refuse"  # no answer within 30 s


def test_off_never_reads_slurm_and_a_bad_mode_is_refused() -> None:
    assert before(OURS, mode="off")["action"] == "plain"
    with pytest.raises(ValueError, match="node_reboot_slurm='yes'"):
        before(IDLE, mode="yes")


def test_another_nodes_record_is_not_this_nodes() -> None:
    # scontrol showed a different NodeName (a prefix, an alias): not proof of this node
    d = before(IDLE, node="node2a")
    assert d["action"] == "plain" and "does not know it" in d["message"]


def test_jobs_are_read_and_named() -> None:
    jobs = sn.parse_jobs("12|alice|RUNNING|0:42|train\n\nbroken line\n13|bob|COMPLETING|1:00|x|y\n")
    assert [j["id"] for j in jobs] == ["12", "13"] and jobs[1]["name"] == "x|y"
    assert sn.jobs_text(jobs[:1]) == "job 12 (alice, train, RUNNING 0:42)"


@pytest.mark.parametrize(
    ("state", "ok"),
    [
        ("IDLE+DRAIN", True),
        ("IDLE*+DRAIN", False),
        ("DOWN+DRAIN+NOT_RESPONDING", False),
        ("", False),
    ],
)
def test_responding_means_slurmd_registered(state: str, ok: bool) -> None:
    assert sn.responding(f"NodeName=node2 State={state} Partitions=gpu" if state else "") is ok


def test_after_a_passing_reboot_the_rollouts_drain_is_resumed() -> None:
    d = sn.after_reboot("node2", "node2", OURS.replace("MIXED", "IDLE"), 0, "")
    assert d["ok"] and d["argv"] == ["scontrol", "update", "nodename=node2", "state=resume"]


def test_slurms_own_reboot_reason_counts_as_the_rollouts() -> None:
    down = "NodeName=node2 State=DOWN+DRAIN Reason=Node unexpectedly rebooted boot_time 1 [slurm@2026-12-07T18:00:00]"
    assert sn.after_reboot("node2", "node2", down, 0, "")["action"] == "resume"


def test_a_callers_check_is_named_when_it_stood_in_for_the_health_pass() -> None:
    d = sn.after_reboot("node2", "node2", OURS, None, "", "the NVIDIA driver check")
    assert d["action"] == "resume" and "passed the NVIDIA driver check" in d["message"]


def test_a_drain_someone_set_during_the_reboot_is_not_undone() -> None:
    d = sn.after_reboot("node3", "node3", ADMIN, 0, "")
    assert d["ok"] and d["action"] == "none" and "maintenance" in d["message"]


@pytest.mark.parametrize(("rc", "word"), [(1, "failed"), (3, "incomplete"), (2, "exit 2")])
def test_a_failed_or_incomplete_pass_keeps_the_node_drained_with_the_failure(
    rc: int, word: str
) -> None:
    out = "driver_loaded: FAIL nvidia module not loaded -> reboot\nmore\n"
    d = sn.after_reboot("node2", "node2", OURS, rc, out)
    assert not d["ok"] and d["action"] == "drain"
    reason = d["argv"][-1].removeprefix("reason=")
    assert reason.startswith(f"gpufleet-reboot: health {word} after reboot: driver_loaded")
    assert "'" not in reason and "=" not in reason and len(reason) <= sn.REASON_MAX


def test_a_failed_pass_on_a_node_slurm_does_not_manage_drains_nothing() -> None:
    d = sn.after_reboot("node2", "", "", 1, "x: FAIL")
    assert not d["ok"] and d["argv"] == [] and "before it takes work" in d["message"]


def test_the_summary_names_done_waiting_left_alone_and_untouched_in_play_order() -> None:
    s = sn.rollout_summary(
        ["node1", "node2", "node3", "node4"],
        {
            "node1": {"state": "done", "message": "node1: passed"},
            "node2": {"state": "waiting", "message": "node2: job 12"},
            "node3": {"state": "left_alone", "message": "node3: maintenance"},
        },
    )
    assert (s["done"], s["waiting"], s["left_alone"], s["untouched"]) == (
        ["node1"], ["node2"], ["node3"], ["node4"],
    )  # fmt: skip
    assert not s["ok"] and s["text"].startswith("ROLLING REBOOT STOPPED")
    assert "untouched: node4" in s["text"] and s["notes"]["node2"] == "node2: job 12"
    # a rerun goes on where this one stopped: the waiting and untouched nodes only
    assert s["rest"] == ["node2", "node4"] and "REBOOT_ARGS='--limit node2,node4'" in s["text"]
    whole = sn.rollout_summary(["a", "b"], {"a": {"state": "done"}, "b": {"state": "left_alone"}})
    assert whole["ok"] and whole["text"].startswith("ROLLING REBOOT COMPLETE")
    assert whole["rest"] == [] and "--limit" not in whole["text"]


def test_a_reason_is_one_bounded_line_without_quotes_or_equals() -> None:
    r = sn.reboot_reason("driver 'R570'\nbranch=x " + "y" * 300)
    assert "\n" not in r and "'" not in r and "=" not in r and len(r) == sn.REASON_MAX
