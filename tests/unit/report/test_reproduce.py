"""gpufleet.report.reproduce: the command in a node card reproduces the record, and every piece
it names exists (the checks suite's test id, make verify, VERIFY_ARGS reaching ansible-playbook)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from checks_helpers import MANIFEST, RECORDINGS, REPO, run_suite
from gpufleet import report
from gpufleet.commands import cmd_verify
from gpufleet.report import reproduce
from gpufleet.results import Record, load_result_file

INFO = {"run_id": "r", "nodes": ["node2"], "inventory": ["/srv/inv/hosts.yml"]}


def _record(
    data: dict[str, Any], node: str, name: str, status: str | None = None
) -> dict[str, Any]:
    hits = [r for r in data["nodes"][node]["records"] if r["name"] == name]
    (hit,) = [r for r in hits if status is None or r["status"] == status]
    return dict(hit)


def test_a_failed_check_is_reproduced_by_its_own_test_on_its_node(tmp_path: Path) -> None:
    """The checks suite on a recording with uncorrectable ECC on GPU 5, as verify runs it; the
    report's reproducer of that record, run as printed, runs exactly that one check and fails
    it again with the same message."""
    suite = tmp_path / "suite"
    suite.mkdir()
    rec = f"--nvml-recording={RECORDINGS / 'ecc-uncorrectable.json'}"
    first = run_suite(suite, "--gpufleet-manifest", str(MANIFEST), rec, "--node=node2")
    assert first.rc == 1
    run = tmp_path / "reports" / "r"
    load_result_file(suite / "checks.json").write(run / "node2" / "checks.json")
    (run / "run.json").write_text(json.dumps(INFO))
    data = report.to_json(report.collect(run))
    failed = _record(data, "node2", "ecc_uncorrectable_volatile", "fail")  # GPU 5 of 8
    how = failed["reproduce"]
    assert how["where"] == "node2"
    assert "test_memory.py::test_ecc_uncorrectable_volatile[gpu5]" in how["command"]
    again = tmp_path / "again.json"
    proc = subprocess.run(
        ["bash", "-c", f"{how['command']} --gpufleet-json={again}"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (only,) = load_result_file(again).records
    assert (only.name, only.status, only.gpu) == (
        "ecc_uncorrectable_volatile",
        "fail",
        failed["gpu"],
    )
    assert only.message == failed["message"]
    assert "1 failed" in proc.stdout and "passed" not in proc.stdout.split("short test summary")[-1]
    # a record that passed has no reproducer
    assert "reproduce" not in _record(data, "node2", "gpu_count")


def test_a_missing_result_is_reproduced_by_make_verify_on_that_node(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({**INFO, "expect": {"checks": ["node2"]}}))
    data = report.to_json(report.collect(run))
    how = _record(data, "node2", "checks:result")["reproduce"]
    assert how == {
        "where": "controller",
        "command": "make verify INVENTORY=/srv/inv/hosts.yml 'VERIFY_ARGS=--limit node2'",
        "what": "make verify on node2 alone",
    }


def test_a_cluster_step_is_reproduced_on_every_node() -> None:
    r = Record("slow-nodes:compare", "warn", node="n3", message="slow")
    for kind in ("slow-nodes", "allreduce", "pair-1-0", "bisect-2-1", "train", "slurm-allreduce"):
        how = reproduce.reproducer("n3", kind, r, None, INFO)
        assert how.where == reproduce.CONTROLLER
        assert how.command == "make verify INVENTORY=/srv/inv/hosts.yml", kind
    how = reproduce.reproducer("n3", "dcgm", r, None, INFO)
    assert how.command.endswith("'VERIFY_ARGS=--limit n3'")


def test_without_an_inventory_in_run_json_the_command_says_what_to_add() -> None:
    r = Record("checks:result", "fail", node="n1")
    how = reproduce.reproducer("n1", "checks", r, None, {"run_id": "old"})
    assert how.command == "make verify 'VERIFY_ARGS=--limit n1'"
    assert how.note == reproduce.NO_INVENTORY and "INVENTORY=" in how.note
    two = reproduce.reproducer("n1", "checks", r, None, {"inventory": ["a", "b"]})
    assert "INVENTORY" not in two.command and "a, b" in two.note


def test_a_suite_record_without_its_test_id_falls_back_to_make_verify() -> None:
    rerun = {"python": "/p", "cwd": "/", "rootdir": "/s", "options": [], "env": {},
             "tests": {"other": "test_x.py::test_other"}}  # fmt: skip
    r = Record("ecc_mode", "warn", node="n1", gpu="0 (x)")
    assert reproduce.reproducer("n1", "checks", r, rerun, INFO).where == reproduce.CONTROLLER


def test_the_pytest_command_quotes_what_the_shell_would_split() -> None:
    rerun = {"python": "/opt/env dir/bin/python", "cwd": "/home/a b", "rootdir": "/s/checks/",
             "options": ["--node=n 1"], "env": {"PYTHONPATH": "/x y"}}  # fmt: skip
    text = reproduce.pytest_command(rerun, "test_a.py::test_b[gpu0]")
    cd, _, rest = text.partition(" && ")
    assert shlex.split(cd) == ["cd", "/home/a b"]
    assert shlex.split(rest) == ["PYTHONPATH=/x y", "/opt/env dir/bin/python", "-m", "pytest",
                                 "/s/checks/test_a.py::test_b[gpu0]", "--node=n 1"]  # fmt: skip


def test_make_verify_with_verify_args_reaches_ansible_playbooks_limit() -> None:
    """The pieces of the controller command exist: the Makefile's verify target hands the
    words of VERIFY_ARGS to gpufleet verify after --, which passes them to ansible-playbook."""
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nverify: setup", 1)[1].split("\n\n", 1)[0]
    assert re.search(r"GF_VERIFY_ARGS VERIFY_ARGS -- \$\(BIN\)/gpufleet verify", recipe)
    assert "export GF_VERIFY_ARGS = $(value VERIFY_ARGS)" in makefile
    assert "export GF_INVENTORY = $(value INVENTORY)" in makefile
    import argparse

    p = argparse.ArgumentParser()
    cmd_verify.register(p.add_subparsers(dest="command"))
    args = p.parse_args(["verify", "--inventory", "/srv/inv/hosts.yml", "--", "--limit", "node2"])
    assert args.ansible_args == ["--limit", "node2"] and args.inventory == "/srv/inv/hosts.yml"
