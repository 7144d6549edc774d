"""nvidia_driver never reboots the controller, decided by identity (machine-id), not by name.

One ansible-playbook run, in check mode, on this machine under several inventory names (every
one with a local connection): each runs only ``tasks/reboot_decision.yml``, the decision,
which holds no reboot task (asserted below before anything runs), with a GPU node's module
state posed (nouveau loaded: a reboot is needed). The connection the decision sees is posed
too (``__nvidia_driver_connection``), so that the machine-id rule is what decides; the
controller's machine-id is this machine's own, or a file of the test's
(``nvidia_driver_controller_machine_id_paths``). Then provision.yml's end-of-run report of
the nodes left to reboot runs on the same hosts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from playbook_runner import REPO, ansible_env, run_playbook, task_keys
from roles_driver_helpers import write_results_task

ROLE = REPO / "roles" / "nvidia_driver"
DECISION = ROLE / "tasks" / "reboot_decision.yml"
NEEDS_REBOOT = {"nouveau": "loaded", "loaded": "none", "disk": "580.95.05"}
NO_REBOOT = {"nouveau": "absent", "loaded": "580.95.05", "disk": "580.95.05"}
OTHER_ID = "0123456789abcdef0123456789abcdef"
REPORT_TASK = "Report the nodes that must be rebooted by hand"


def test_the_decision_file_cannot_reboot() -> None:
    """What the run below executes holds no reboot and includes nothing that could."""
    keys = task_keys(yaml.safe_load(DECISION.read_text(encoding="utf-8")))
    assert not {k for k in keys if "reboot" in k or "include" in k or "import" in k}, keys


def _this_machine_id() -> str:
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            text = Path(p).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if len(text) == 32:
            return text
    pytest.skip("this machine has no readable machine-id")
    raise AssertionError  # unreachable


def _report_task() -> dict[str, Any]:
    plays = yaml.safe_load((REPO / "playbooks" / "provision.yml").read_text(encoding="utf-8"))
    for play in plays:
        for task in play.get("tasks", []):
            if task.get("name") == REPORT_TASK:
                return dict(task)
    raise AssertionError(f"provision.yml has no task {REPORT_TASK!r}")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict[str, Any]], str]:
    this_id = _this_machine_id()
    assert this_id != OTHER_ID
    tmp = tmp_path_factory.mktemp("reboot")
    other = tmp / "other-machine-id"
    other.write_text(OTHER_ID + "\n", encoding="utf-8")
    garbage = tmp / "garbage-machine-id"
    garbage.write_text("uninitialized\n", encoding="utf-8")
    ssh = {"test_connection": "ssh", "test_kmod": NEEDS_REBOOT}
    hosts: dict[str, dict[str, Any]] = {
        # this machine under its cluster name: the controller by machine-id
        "node1": {**ssh},
        # another machine-id on the controller: the reboot is allowed
        "node2": {**ssh, "nvidia_driver_controller_machine_id_paths": [str(other)]},
        # the controller's machine-id unreadable or not an id: may be the controller
        "node3": {
            **ssh,
            "nvidia_driver_controller_machine_id_paths": [str(tmp / "missing"), str(garbage)],
        },
        # nvidia_driver_reboot: never
        "node4": {**ssh, "nvidia_driver_reboot": "never"},
        # the names still guard: a local connection, a loopback address
        "node5": {
            "test_connection": "ansible.builtin.local",
            "test_kmod": NEEDS_REBOOT,
            "nvidia_driver_controller_machine_id_paths": [str(other)],
        },
        "node6": {
            **ssh,
            "ansible_host": "127.0.1.1",
            "nvidia_driver_controller_machine_id_paths": [str(other)],
        },
        # the module is loaded at the installed version: no reboot needed, nothing read
        "node7": {"test_connection": "ssh", "test_kmod": NO_REBOOT},
    }
    for h in hosts.values():
        h["ansible_connection"] = "local"
        h["ansible_python_interpreter"] = sys.executable
    inventory = tmp / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}), encoding="utf-8")
    results = tmp / "results"
    results.mkdir()
    facts = [
        "__nvidia_driver_need_reboot",
        "__nvidia_driver_local_by_name",
        "__nvidia_driver_identity",
        "__nvidia_driver_may_reboot",
        "nvidia_driver_reboot_required",
        "nvidia_driver_reboot_reason",
    ]
    decide = {
        "name": "decide",
        "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "reboot_decision"},
        "vars": {
            "__nvidia_driver_connection": "{{ test_connection }}",
            "__nvidia_driver_kmod_state": "{{ test_kmod }}",
            "__nvidia_driver_modprobe": {"skipped": True, "changed": False},
        },
    }
    collect = {
        "name": "collect",
        "ansible.builtin.set_fact": {
            "r": "{{ dict(__names | zip(__names | map('extract', vars))) }}",
        },
        "vars": {"__names": facts},
    }
    write = write_results_task(results / "{{ inventory_hostname }}.json", check_mode=False)
    play = [
        {"hosts": "all", "gather_facts": False, "tasks": [decide, collect, write]},
        {"hosts": "all", "gather_facts": False, "tasks": [_report_task()]},
    ]
    playbook = tmp / "reboot.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    res = run_playbook(
        playbook,
        "--check",
        inventory=inventory,
        env=ansible_env(json_results=True),
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
    out = {
        name: json.loads((results / f"{name}.json").read_text(encoding="utf-8")) for name in hosts
    }
    return out, res.stdout


def _bool(v: object) -> bool:
    return v is True or str(v).strip().lower() == "true"


@pytest.mark.ansible
def test_the_controller_under_its_cluster_name_is_not_rebooted(
    run: tuple[dict[str, dict[str, Any]], str],
) -> None:
    r, stdout = run
    node1 = r["node1"]
    assert _bool(node1["__nvidia_driver_need_reboot"])
    assert not _bool(node1["__nvidia_driver_local_by_name"])  # the names let it through
    assert node1["__nvidia_driver_identity"] == "controller"
    assert not _bool(node1["__nvidia_driver_may_reboot"])
    assert _bool(node1["nvidia_driver_reboot_required"])
    assert "is the controller (its machine-id" in node1["nvidia_driver_reboot_reason"]
    warning = next(line for line in stdout.splitlines() if "WARNING node1:" in line)
    assert "is the controller (its machine-id" in warning
    assert "reboot it by hand" in warning and "then rerun" in warning
    assert "REBOOT REQUIRED node1: this host is the controller" in stdout


@pytest.mark.ansible
def test_another_machine_may_be_rebooted(run: tuple[dict[str, dict[str, Any]], str]) -> None:
    r, stdout = run
    node2 = r["node2"]
    assert node2["__nvidia_driver_identity"] == "other"
    assert _bool(node2["__nvidia_driver_may_reboot"])
    assert not _bool(node2["nvidia_driver_reboot_required"])
    assert node2["nvidia_driver_reboot_reason"] == ""
    assert "WARNING node2:" not in stdout and "REBOOT REQUIRED node2" not in stdout


@pytest.mark.ansible
@pytest.mark.parametrize(
    ("host", "identity", "words"),
    [
        ("node3", "unknown", ["may be the controller", "controller: ", "missing"]),
        ("node4", "unchecked", ["nvidia_driver_reboot is never"]),
        ("node5", "other", ["is the controller (ansible_connection ansible.builtin.local"]),
        ("node6", "other", ["is the controller (", "host 127.0.1.1"]),
    ],
)
def test_no_reboot_when_it_may_be_the_controller_or_is_not_allowed(
    run: tuple[dict[str, dict[str, Any]], str], host: str, identity: str, words: list[str]
) -> None:
    r, stdout = run
    facts = r[host]
    assert facts["__nvidia_driver_identity"] == identity
    assert not _bool(facts["__nvidia_driver_may_reboot"])
    assert _bool(facts["nvidia_driver_reboot_required"])
    for w in words:
        assert w in facts["nvidia_driver_reboot_reason"], facts
    assert f"WARNING {host}:" in stdout
    assert f"REBOOT REQUIRED {host}: " in stdout


@pytest.mark.ansible
def test_no_reboot_needed_reads_nothing(run: tuple[dict[str, dict[str, Any]], str]) -> None:
    r, stdout = run
    node7 = r["node7"]
    assert not _bool(node7["__nvidia_driver_need_reboot"])
    assert node7["__nvidia_driver_identity"] == "unchecked"
    assert not _bool(node7["nvidia_driver_reboot_required"])
    assert node7["nvidia_driver_reboot_reason"] == ""
    assert "REBOOT REQUIRED node7" not in stdout
