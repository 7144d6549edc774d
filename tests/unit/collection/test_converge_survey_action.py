"""gpufleet.core.converge_state's action plugin with a survey: which checks it answers on the
controller and which it sends to the node. The node side is the real module_utils code run
on temporary files (as the module would), counted per call."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.action import converge_state as A  # noqa: E402
from ansible_collections.gpufleet.core.plugins.module_utils import converge as N  # noqa: E402


def _runner(argv: list[str]) -> tuple[int, str, str]:
    return 1, "", "not on this machine"


class Node:
    """The node: a stamp directory, and the module's answers with the calls counted."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = str(tmp_path / "stamps")
        self.conf = tmp_path / "nccl.env"
        self.conf.write_text("A=1\n")
        self.watch: dict[str, Any] = {"files": [str(self.conf)], "rpmdb": False}
        self.calls: list[str] = []

    def module(self, module_name: str, module_args: dict[str, Any], task_vars: Any) -> Any:
        assert "survey" not in module_args, "the survey never goes to the node"
        state = module_args["state"]
        self.calls.append(state)
        if state == "survey":
            return {"changed": False, "survey": N.survey(self.dir, _runner)}
        if state == "settle":
            return {"changed": False, "settled": N.settle(self.dir, _runner)}
        if state == "record":
            N.record(
                self.dir,
                module_args["role"],
                module_args["digest"],
                module_args["watch"],
                module_args.get("exports") or {},
                _runner,
            )
            return {"changed": False, "converged": True}
        if not module_args.get("enabled", True):
            return {"changed": False, "converged": False, "reason": "fast path off", "exports": {}}
        res = N.check(
            self.dir, module_args["role"], module_args["digest"], module_args["watch"], _runner
        )
        return {"changed": False, **res}


def _run(
    node: Node,
    monkeypatch: pytest.MonkeyPatch,
    args: dict[str, Any],
    facts: dict[str, Any] | None = None,
) -> Any:
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action: Any = object.__new__(A.ActionModule)
    action._task = SimpleNamespace(args={"stamp_dir": node.dir, **args})
    action._execute_module = node.module
    return action.run(task_vars={"inventory_hostname": "node1", "ansible_facts": facts or {}})


def _check_args(node: Node, survey: Any, digest: str = "d1", **kw: Any) -> dict[str, Any]:
    return {
        "role": "torch_env",
        "state": "check",
        "digest": digest,
        "watch": node.watch,
        "survey": survey,
        "enabled": True,
        "exports": ["torch_env_result"],
        **kw,
    }


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    n = Node(tmp_path)
    _run(
        n,
        monkeypatch,
        {
            "role": "torch_env",
            "state": "record",
            "digest": "d1",
            "watch": n.watch,
            "exports": {"torch_env_result": {"torch": "2.13.0"}},
        },
    )
    n.calls.clear()
    return n


def test_a_survey_answers_a_converged_role_without_a_node_call(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    survey = _run(node, monkeypatch, {"state": "survey"})
    assert len(survey["survey"]["nonce"]) == 32
    got = _run(node, monkeypatch, _check_args(node, survey))
    assert got["converged"] is True and got["surveyed"] is True
    assert got["exports"] == {"torch_env_result": {"torch": "2.13.0"}}
    assert got["digest"] == "d1"
    # the settle at the end of the play has nothing to do (nothing ran in full)
    settled = _run(node, monkeypatch, {"state": "settle", "survey": survey})
    assert settled["surveyed"] is True
    assert node.calls == ["survey"]
    # the same watch list, templated to other Python types (a tuple), is the same list
    watch = dict(node.watch, files=tuple(node.watch["files"]))
    assert _run(node, monkeypatch, _check_args(node, survey, watch=watch))["surveyed"] is True


@pytest.mark.parametrize(
    "case",
    ["digest", "watch", "drift", "unknown_role", "off", "no_survey", "failed_survey", "errored"],
)
def test_anything_but_a_plain_yes_asks_the_node(
    node: Node, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    survey = _run(node, monkeypatch, {"state": "survey"})
    args = _check_args(node, survey)
    if case == "digest":
        args["digest"] = "d2"  # inputs changed since the stamp
    elif case == "watch":
        args["watch"] = dict(node.watch, paths=["/opt/new"])  # the role watches more now
    elif case == "drift":
        node.conf.write_text("A=2\n")
        survey = _run(node, monkeypatch, {"state": "survey"})
        args["survey"] = survey
    elif case == "unknown_role":
        args["role"] = "cluster_network"
    elif case == "off":
        args["enabled"] = False
    elif case == "no_survey":
        args["survey"] = {}
    elif case == "failed_survey":
        args["survey"] = dict(survey, failed=True)
    elif case == "errored":  # provision.yml's failed_when: false keeps the node in the play
        args["survey"] = {"changed": False, "msg": "survey failed", "failed_when_result": False}
    got = _run(node, monkeypatch, args)
    assert "surveyed" not in got
    assert node.calls.count("check") == 1, node.calls


def test_a_role_that_runs_in_full_spends_the_survey_for_the_roles_after_it(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full run may change what later roles watch: after it, they check on the node; the
    settle at the end writes (the survey's answer about the rpm database is stale)."""
    N.record(node.dir, "dcgm", "d5", node.watch, {}, _runner)
    survey = _run(node, monkeypatch, {"state": "survey"})
    full = _run(node, monkeypatch, _check_args(node, survey, digest="d-new"))
    assert full["converged"] is False
    spent = full["ansible_facts"]
    assert spent == {A.SPENT_FACT: survey["survey"]["nonce"]}
    later = _run(node, monkeypatch, _check_args(node, survey, role="dcgm", digest="d5"), spent)
    assert later["converged"] is True and "surveyed" not in later
    _run(node, monkeypatch, {"state": "settle", "survey": survey}, spent)
    assert node.calls == ["survey", "check", "check", "settle"]
    # a spent mark from another survey (an older run's fact) does not spend this one
    again = _run(node, monkeypatch, {"state": "survey"})
    got = _run(node, monkeypatch, _check_args(node, again, role="dcgm", digest="d5"), spent)
    assert got["surveyed"] is True
