"""The converged fast path: the controller's inputs digest (gpufleet.provisioning.converge_digest) and the node's
stamp check (the collection's module_utils/converge.py), on temporary files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpufleet.provisioning import converge_digest as C
from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.module_utils import converge as N  # noqa: E402

FACTS: dict[str, Any] = {
    "distribution": "Rocky",
    "distribution_major_version": "9",
    "kernel": "5.14.0-503",
    "architecture": "x86_64",
}


def _runner_for(outputs: dict[tuple[str, ...], tuple[int, str, str]]) -> N.Runner:
    def run(argv: list[str]) -> tuple[int, str, str]:
        return outputs.get(tuple(argv), (1, "", "unknown command"))

    return run


# --------------------------------------------------------------------------- controller


def test_relevant_names_take_the_role_and_shared_prefixes_less_exports() -> None:
    names = [
        "gpufleet_converge_fast",
        "torch_env_prefix",
        "torch_env_result",
        "gpufleet_plan",
        "torch_envx",
        "other_torch_env_a",
        "__torch_env_x",
    ]
    assert C.relevant_names(names, "torch_env", exclude=["torch_env_result"]) == [
        "gpufleet_plan",
        "torch_env_prefix",
    ]


@pytest.mark.parametrize("role", ["", "torch-env", "../x", "a b"])
def test_relevant_names_refuse_a_role_that_is_not_a_plain_name(role: str) -> None:
    with pytest.raises(ValueError, match="role"):
        C.relevant_names([], role)


def test_digest_is_stable_and_moves_with_each_input(tmp_path: Path) -> None:
    role = tmp_path / "role"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "main.yml").write_text("---\n- name: a\n")
    C.clear_digest_cache()

    def digest(vars_: dict[str, Any], facts: dict[str, Any], extra: dict[str, Any]) -> str:
        return C.inputs_digest("r", vars_, facts, extra, {"role": str(role)})

    base = digest({"r_a": 1, "gpufleet_plan": {"variant": "cu128"}}, FACTS, {})
    assert base == digest({"gpufleet_plan": {"variant": "cu128"}, "r_a": 1}, dict(FACTS), {})
    assert base != digest({"r_a": 2, "gpufleet_plan": {"variant": "cu128"}}, FACTS, {})
    assert base != digest({"r_a": 1, "gpufleet_plan": {"variant": "cu130"}}, FACTS, {})
    assert base != digest(
        {"r_a": 1, "gpufleet_plan": {"variant": "cu128"}}, {**FACTS, "kernel": "5.14.0-570"}, {}
    )
    assert base != digest(
        {"r_a": 1, "gpufleet_plan": {"variant": "cu128"}}, FACTS, {"peers": ["10.0.0.2"]}
    )
    # a fact outside FACT_KEYS (uptime, memory) does not move it
    assert base == digest(
        {"r_a": 1, "gpufleet_plan": {"variant": "cu128"}}, {**FACTS, "uptime_seconds": 5}, {}
    )
    # a role file edited: the tree digest is cached per process, so a new process sees it
    (role / "tasks" / "main.yml").write_text("---\n- name: b\n")
    C.clear_digest_cache()
    assert base != digest({"r_a": 1, "gpufleet_plan": {"variant": "cu128"}}, FACTS, {})


def test_tree_digest_ignores_caches_and_names_the_path(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    C.clear_digest_cache()
    before = C.tree_digest(str(tmp_path))
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    C.clear_digest_cache()
    assert C.tree_digest(str(tmp_path)) == before
    os.rename(tmp_path / "a.py", tmp_path / "b.py")
    C.clear_digest_cache()
    assert C.tree_digest(str(tmp_path)) != before
    assert C.tree_digest(str(tmp_path / "missing")) == "absent"


# --------------------------------------------------------------------------- node


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    conf = tmp_path / "etc" / "nccl.env"
    conf.parent.mkdir()
    conf.write_text("NCCL_SOCKET_IFNAME=eth0\n")
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "torch-2.13.0.dist-info").mkdir()
    manifest = tmp_path / "etc" / "manifest.json"
    manifest.write_text(
        json.dumps({"env_torch": "2.13.0", "cluster_address": "10.0.0.1", "provisioned_at": "t1"})
    )
    watch = {
        "files": [str(conf), str(tmp_path / "etc" / "*.repo")],
        "paths": [str(tmp_path / "env")],
        "listings": [str(tmp_path / "env" / "lib" / "python*" / "site-packages")],
        "json_keys": [{"path": str(manifest), "keys": ["env_torch"]}],
        "services": ["firewalld.service"],
        "commands": {"zone": ["firewall-cmd", "--zone=gpufleet", "--list-all"]},
        "rpmdb": True,
    }
    rpmdb = tmp_path / "rpmdb"
    rpmdb.mkdir()
    (rpmdb / "rpmdb.sqlite").write_bytes(b"db")
    outputs = {
        ("systemctl", "is-enabled", "firewalld.service"): (0, "enabled\n", ""),
        ("systemctl", "is-active", "firewalld.service"): (0, "active\n", ""),
        ("firewall-cmd", "--zone=gpufleet", "--list-all"): (
            0,
            "gpufleet\n  sources: 10.0.0.2\n",
            "",
        ),
        ("rpm", "--eval", "%{_dbpath}"): (0, f"{rpmdb}\n", ""),
    }
    return {
        "dir": str(tmp_path / "stamps"),
        "watch": watch,
        "outputs": outputs,
        "conf": conf,
        "site": site,
        "manifest": manifest,
        "rpmdb": rpmdb,
    }


def _record(node: dict[str, Any], digest: str = "d1") -> bool:
    return N.record(
        str(node["dir"]),
        "cluster_network",
        digest,
        node["watch"],
        {"gpufleet_cluster_address": "10.0.0.1"},
        _runner_for(node["outputs"]),
    )


def _check(node: dict[str, Any], digest: str = "d1", remove: bool = True) -> dict[str, Any]:
    return N.check(
        str(node["dir"]),
        "cluster_network",
        digest,
        node["watch"],
        _runner_for(node["outputs"]),
        remove=remove,
    )


def test_no_stamp_means_a_full_run(node: dict[str, Any]) -> None:
    res = _check(node)
    assert res["converged"] is False
    assert "no stamp" in str(res["reason"])


def test_an_unchanged_node_is_converged_and_gets_its_exports_back(node: dict[str, Any]) -> None:
    assert _record(node) is True
    assert _record(node) is False  # same content: no change reported
    stamp = Path(str(node["dir"]), "cluster_network.json")
    assert oct(stamp.stat().st_mode & 0o777) == "0o600"
    # a key the role does not watch may change (another role's key, the timestamp)
    data = json.loads(Path(str(node["manifest"])).read_text())
    data["provisioned_at"] = "t2"
    data["cluster_address"] = "10.0.0.9"
    Path(str(node["manifest"])).write_text(json.dumps(data))
    res = _check(node)
    assert res == {
        "converged": True,
        "reason": "",
        "exports": {"gpufleet_cluster_address": "10.0.0.1"},
        "removed": False,
    }


DRIFTS = [
    ("edit_file", "nccl.env"),
    ("chmod_file", "nccl.env"),
    ("add_repo", "extra.repo"),
    ("pip_install", "site-packages"),
    ("manifest_key", "env_torch"),
    ("service_off", "firewalld.service"),
    ("zone_runtime", "zone"),
    ("rpm_transaction", "rpmdb.sqlite"),
    ("env_removed", "env"),
]


@pytest.mark.parametrize(("drift", "says"), DRIFTS)
def test_each_kind_of_drift_runs_the_role_in_full_and_drops_the_stamp(
    node: dict[str, Any], drift: str, says: str
) -> None:
    _record(node)
    _drift(node, drift)
    res = _check(node)
    assert res["converged"] is False
    assert "drifted" in str(res["reason"]) and says in str(res["reason"]), res["reason"]
    assert res["removed"] is True
    assert not Path(str(node["dir"]), "cluster_network.json").exists()
    # the stamp is gone: the next check fails too, even if the drift is undone by hand
    assert _check(node)["converged"] is False


def _drift(node: dict[str, Any], drift: str) -> None:
    conf, site, outputs = Path(str(node["conf"])), Path(str(node["site"])), node["outputs"]
    assert isinstance(outputs, dict)
    if drift == "edit_file":
        conf.write_text("NCCL_SOCKET_IFNAME=eth1\n")
    elif drift == "chmod_file":
        conf.chmod(0o600)
    elif drift == "add_repo":
        (conf.parent / "extra.repo").write_text("[x]\n")
    elif drift == "pip_install":
        (site / "numpy-2.0.dist-info").mkdir()
    elif drift == "manifest_key":
        Path(str(node["manifest"])).write_text(json.dumps({"env_torch": "2.12.0"}))
    elif drift == "service_off":
        outputs[("systemctl", "is-active", "firewalld.service")] = (3, "inactive\n", "")
    elif drift == "zone_runtime":
        outputs[("firewall-cmd", "--zone=gpufleet", "--list-all")] = (
            0,
            "gpufleet\n  sources:\n",
            "",
        )
    elif drift == "rpm_transaction":
        db = Path(str(node["rpmdb"])) / "rpmdb.sqlite"
        db.write_bytes(b"db+one package")
    elif drift == "env_removed":
        for p in sorted(Path(str(node["site"])).parents[2].rglob("*"), reverse=True):
            p.rmdir()
        Path(str(node["site"])).parents[2].rmdir()


def test_changed_inputs_run_in_full(node: dict[str, Any]) -> None:
    _record(node, digest="d1")
    res = _check(node, digest="d2")
    assert res["converged"] is False and "inputs changed" in str(res["reason"])


def test_check_mode_keeps_the_stamp(node: dict[str, Any]) -> None:
    _record(node)
    Path(str(node["conf"])).write_text("changed\n")
    assert _check(node, remove=False)["converged"] is False
    assert Path(str(node["dir"]), "cluster_network.json").exists()


def test_a_broken_or_foreign_stamp_is_no_stamp(node: dict[str, Any]) -> None:
    _record(node)
    stamp = Path(str(node["dir"]), "cluster_network.json")
    stamp.write_text("{not json")
    assert "no stamp" in str(_check(node)["reason"])
    stamp.write_text(json.dumps({"schema": 99, "digest": "d1"}))
    assert "no stamp" in str(_check(node)["reason"])


def test_unknown_watch_kinds_and_bad_role_names_are_refused(node: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unknown watch kind"):
        N.observe({"filez": []}, _runner_for({}))
    with pytest.raises(ValueError, match="role"):
        N.stamp_path("/tmp", "../etc/passwd")


def test_missing_commands_are_observed_not_fatal() -> None:
    def missing(argv: list[str]) -> tuple[int, str, str]:
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    seen = N.observe(
        {"services": ["x.service"], "commands": {"c": ["nope"]}, "rpmdb": True}, missing
    )
    assert seen["services"]["x.service"].startswith("systemctl:")
    assert seen["commands"]["c"].startswith("cannot run nope")
    assert isinstance(seen["rpmdb"], dict)


def test_bytecode_caches_in_a_listing_are_not_drift(node: dict[str, Any]) -> None:
    """A verify run as root writes site-packages/__pycache__ (single-file modules)."""
    _record(node)
    (Path(node["site"]) / "__pycache__").mkdir()
    assert _check(node)["converged"] is True


def test_settle_moves_every_stamp_to_the_rpm_database_the_run_leaves(
    node: dict[str, Any],
) -> None:
    """Later roles of the same run install packages: settled at the end of the run, that is
    not drift; a transaction after the run still is."""
    _record(node)
    N.record(str(node["dir"]), "torch_env", "d9", {"rpmdb": True}, {}, _runner_for(node["outputs"]))
    N.record(str(node["dir"]), "no_rpm", "d8", {"rpmdb": False}, {}, _runner_for(node["outputs"]))
    db = Path(node["rpmdb"]) / "rpmdb.sqlite"
    db.write_bytes(b"db + cuda + python3.11")  # what cuda_toolkit and torch_env installed
    assert _check(node)["converged"] is False  # without settle: drift (stamp dropped)
    _record(node)
    db.write_bytes(b"db + cuda + python3.11 + firewalld")
    runner = _runner_for(node["outputs"])
    assert N.settle(str(node["dir"]), runner, write=False) == ["cluster_network", "torch_env"]
    assert _check(node)["converged"] is False  # check mode wrote nothing
    _record(node)
    db.write_bytes(b"db + cuda + python3.11 + firewalld + more")
    assert N.settle(str(node["dir"]), runner) == ["cluster_network", "torch_env"]
    assert N.settle(str(node["dir"]), runner) == []  # settled already
    assert _check(node)["converged"] is True
    db.write_bytes(b"an admin's dnf update after the run")
    res = _check(node)
    assert res["converged"] is False and "rpmdb" in str(res["reason"])
    assert N.settle(str(node["dir"] + "-none"), runner) == []


# --------------------------------------------------------------------------- survey


def _counting(outputs: dict[tuple[str, ...], tuple[int, str, str]]) -> tuple[N.Runner, list[str]]:
    calls: list[str] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(" ".join(argv))
        return outputs.get(tuple(argv), (1, "", "unknown command"))

    return run, calls


def test_survey_answers_every_role_from_the_watch_lists_the_stamps_kept(
    node: dict[str, Any],
) -> None:
    _record(node)
    torch_watch = {"paths": [str(Path(str(node["site"])).parents[2])], "rpmdb": True}
    N.record(
        str(node["dir"]), "torch_env", "d9", torch_watch, {"r": 1}, _runner_for(node["outputs"])
    )
    run, calls = _counting(node["outputs"])
    got = N.survey(str(node["dir"]), run)
    assert got["settled"] is True
    assert got["roles"]["cluster_network"] == {
        "digest": "d1",
        "watch": node["watch"],
        "converged": True,
        "reason": "",
        "exports": {"gpufleet_cluster_address": "10.0.0.1"},
    }
    assert got["roles"]["torch_env"]["converged"] is True
    assert got["roles"]["torch_env"]["watch"] == torch_watch
    # two roles watch the rpm database: one `rpm --eval` for the survey, not one per role
    assert calls.count("rpm --eval %{_dbpath}") == 1
    assert len(calls) == len(set(calls))


@pytest.mark.parametrize(("drift", "says"), DRIFTS)
def test_survey_sees_each_kind_of_drift_and_leaves_the_stamp(
    node: dict[str, Any], drift: str, says: str
) -> None:
    """The survey only reads: the role's own check (which the gate falls back to) drops the
    stamp and says why."""
    _record(node)
    _drift(node, drift)
    entry = N.survey(str(node["dir"]), _runner_for(node["outputs"]))["roles"]["cluster_network"]
    assert entry["converged"] is False and entry["exports"] == {}
    assert "drifted" in entry["reason"] and says in entry["reason"], entry["reason"]
    assert Path(str(node["dir"]), "cluster_network.json").exists()
    assert _check(node)["converged"] is False


def test_survey_says_whether_settle_has_work_and_skips_stamps_it_cannot_use(
    node: dict[str, Any],
) -> None:
    runner = _runner_for(node["outputs"])
    assert N.survey(str(node["dir"]), runner) == {"roles": {}, "settled": True}  # no stamps yet
    _record(node)
    # a stamp from before stamps kept their watch list: no answer for that role (it checks
    # on the node itself), but its rpm identity still counts for settle
    old = Path(str(node["dir"]), "nvidia_driver.json")
    data = json.loads(Path(str(node["dir"]), "cluster_network.json").read_text())
    del data["watch"]
    data["observed"]["rpmdb"] = {"/var/lib/rpm/rpmdb.sqlite": "size=1 mtime_ns=1 ino=1"}
    old.write_text(json.dumps(data))
    Path(str(node["dir"]), "broken.json").write_text("{not json")
    # a file whose name is no role name is no stamp, whatever it holds
    Path(str(node["dir"]), "not-a-role.json").write_text(
        Path(str(node["dir"]), "cluster_network.json").read_text()
    )
    got = N.survey(str(node["dir"]), runner)
    assert sorted(got["roles"]) == ["cluster_network"]
    assert got["settled"] is False
    old.unlink()
    assert N.survey(str(node["dir"]), runner)["settled"] is True
    (Path(str(node["rpmdb"])) / "rpmdb.sqlite").write_bytes(b"db + a package")
    got = N.survey(str(node["dir"]), runner)
    assert got["settled"] is False and got["roles"]["cluster_network"]["converged"] is False


def test_the_memo_runner_runs_each_command_once_and_repeats_its_error() -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[0] == "missing":
            raise OSError("no such file")
        return 0, "out", ""

    memo = N.memo_runner(run)
    assert memo(["a", "1"]) == memo(["a", "1"]) == (0, "out", "")
    for _ in range(2):
        with pytest.raises(OSError, match="no such file"):
            memo(["missing"])
    assert calls == [["a", "1"], ["missing"]]
