"""playbooks/verify.yml end to end on this machine: two "nodes" over the local connection
(127.0.0.1 and 127.0.0.2, 2 gloo ranks each), so the cluster all-reduce really spans two
torchrun agents with a static rendezvous; then the same with one node broken."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from local_nodes import run_playbook, write_inventory

pytestmark = [pytest.mark.slow, pytest.mark.ansible]

#: steps a test leaves out when it asks nothing of them (compute per node and the five other
#: collectives: 10-20 s a run on two cores; test_two_nodes_all_reduce_and_report runs them)
NOT_ASKED = ("-e", "verify_compute=false", "-e", "verify_collectives=false")


def _play(repo: Path, tmp: Path, n2_extra: str = "") -> tuple[int, str, dict[str, Any], Path]:
    inv = write_inventory(tmp, n2_extra)
    rc, out = run_playbook("verify.yml", inv, "-e", "verify_run_id=t1")
    run = tmp / "rep" / "t1"
    summary = (
        json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    )
    return rc, out, summary, run


def _lock(tmp: Path, node: str, run_id: str, age_s: int) -> Path:
    """A node lock as another run leaves it (prepare.yml's layout)."""
    lock = tmp / "work" / f".lock.{node}"
    lock.mkdir(parents=True)
    (lock / "owner").write_text(f"{run_id} {int(time.time()) - age_s} otherhost:/other/checkout\n")
    return lock


def test_two_nodes_all_reduce_and_report(repo_root: Path, tmp_path: Path) -> None:
    stale = _lock(tmp_path, "n1", "dead-run", age_s=3 * 3600)  # its run died hours ago
    rc, out, summary, run = _play(repo_root, tmp_path)
    assert rc == 0, out[-5000:]
    info = json.loads((run / "run.json").read_text())
    # what the report compares runs by (gpufleet.report.changes): the inventory, the time
    assert info["inventory"] == [str(tmp_path / "hosts.yml")], info["inventory"]
    assert info["finished"].endswith("Z") and summary["changes"]["previous"] is None
    assert "taken over from run dead-run" in out
    assert not stale.exists() and not (tmp_path / "work" / ".lock.n2").exists(), "locks released"
    assert summary["status"] == "pass"
    for name in ("summary.json", "summary.md", "index.html", "junit.xml", "run.json"):
        assert (run / name).is_file(), name
    assert (run.parent / "latest").resolve() == run.resolve()
    for node in ("n1", "n2"):
        assert (run / node / "probe.json").is_file()
        assert (run / node / "allreduce.json").is_file()
    assert summary["busbw_factors"] == {"4": 1.5}
    rows = summary["bandwidth"]
    assert rows, "no bandwidth rows"
    # nccl-tests' factor of each collective at n = 4: all_reduce 2(n-1)/n, all_gather,
    # reduce_scatter, alltoall (n-1)/n, broadcast and sendrecv 1
    factor = {
        "all_reduce": 1.5,
        "all_gather": 0.75,
        "reduce_scatter": 0.75,
        "alltoall": 0.75,
        "broadcast": 1.0,
        "sendrecv": 1.0,
    }
    assert {r["op"] for r in rows} == set(factor), {r["op"] for r in rows}
    for r in rows:
        assert r["world_size"] == 4
        assert r["busbw"] == pytest.approx(r["algbw"] * factor[r["op"]], rel=1e-3), r
    assert summary["busbw_factors_by_op"]["alltoall"] == {"4": 0.75}
    meta = json.loads((run / "n1" / "allreduce.json").read_text())["meta"]
    assert meta["nnodes"] == 2
    assert {x["rank"] for x in meta["ranks"]} == {0, 1, 2, 3}
    assert "PASS" in out
    # issue 40 on the CPU: the standard tier, compute per node, every collective, SDC, IB
    assert summary["tier"]["name"] == "standard" and summary["tier"]["within"] is True
    assert [n["node"] for n in summary["compute"]["nodes"]] == ["n1", "n2"]
    assert all(n["tflops"] > 0 for n in summary["compute"]["nodes"]), summary["compute"]
    ops = {o["op"]: o["status"] for o in summary["collectives"]["ops"]}
    assert set(ops) == set(factor) - {"all_reduce"} and set(ops.values()) <= {"pass", "skip"}, ops
    (group,) = summary["sdc"]["groups"]
    assert group["nodes"] == ["n1", "n2"] and group["mismatches"] == [], group
    assert {p["status"] for p in summary["ib"]["ports"]} == {"skip"}, summary["ib"]
    assert info["expect"]["compute"] == ["n1", "n2"] and info["expect"]["ibbw"] == ["n1", "n2"]
    files = [json.loads(f.read_text()) for f in run.glob("n*/*.json")]
    assert files and {f.get("run_id") for f in files} == {"t1"}, "every node file names its run"
    # the same run id again: refused before anything runs, the report of t1 untouched
    before = (run / "summary.json").read_text()
    rc2, out2 = run_playbook("verify.yml", tmp_path / "hosts.yml", "-e", "verify_run_id=t1")
    assert rc2 != 0
    assert "already holds the report of an earlier run with run id t1" in " ".join(out2.split())
    assert (run / "summary.json").read_text() == before


def test_a_limited_run_verifies_the_nodes_it_targets(tmp_path: Path) -> None:
    """--limit n2,n3: those two are the cluster (n2 the master, as n1 is left out); n1 is
    neither verified nor reported as a node that dropped out."""
    inv = write_inventory(tmp_path, n3_extra="")
    rc, out = run_playbook(
        "verify.yml",
        inv,
        "--limit",
        "n2,n3",
        "-e",
        "verify_run_id=t3",
        "-e",
        "verify_run_checks=false",
        "-e",
        "verify_run_train=false",
        *NOT_ASKED,
    )
    run = tmp_path / "rep" / "t3"
    assert rc == 0, out[-5000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "pass", summary
    assert "dropped out" not in out and "n1" not in json.dumps(summary)
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["n2", "n3"]
    meta = json.loads((run / "n2" / "allreduce.json").read_text())["meta"]
    assert meta["nnodes"] == 2 and {x["rank"] for x in meta["ranks"]} == {0, 1, 2, 3}


def test_the_quick_tier_runs_no_cluster_step_and_says_its_budget(tmp_path: Path) -> None:
    """TIER=quick (verify_tier quick): the node checks and compute per device only, no
    pre-check and no cluster launch; the report names the tier and its 60 s budget."""
    inv = write_inventory(tmp_path)
    rc, out = run_playbook("verify.yml", inv, "-e", "verify_run_id=tq", "-e", "verify_tier=quick")
    run = tmp_path / "rep" / "tq"
    assert rc == 0, out[-5000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tier"]["name"] == "quick" and summary["tier"]["budget_s"] == 60, summary["tier"]
    assert isinstance(summary["tier"]["elapsed_s"], float)
    for node in ("n1", "n2"):
        kinds = sorted(p.stem for p in (run / node).glob("*.json"))
        assert kinds == ["checks", "compute"], (node, kinds)
    assert "tier <b>quick</b>" in (run / "index.html").read_text()


def test_the_burnin_tier_holds_the_devices_and_reports_samples(tmp_path: Path) -> None:
    """TIER=burnin DURATION=4s without the cluster steps (verify_run_cluster false): each node's
    burnin.json holds its matmul intervals, the verdicts (no NVML on the CPU: the throttle
    check says so) and the report's burn-in section."""
    inv = write_inventory(tmp_path)
    rc, out = run_playbook(
        "verify.yml",
        inv,
        "-e",
        "verify_run_id=tb",
        "-e",
        "verify_tier=burnin",
        "-e",
        "verify_burnin_duration=4s",
        "-e",
        "verify_run_cluster=false",
    )
    run = tmp_path / "rep" / "tb"
    assert rc == 0, out[-5000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tier"]["name"] == "burnin" and summary["tier"]["duration_s"] == 4
    nodes = {n["node"]: n for n in summary["burnin"]["nodes"]}
    assert sorted(nodes) == ["n1", "n2"], summary["burnin"]
    for node, n in nodes.items():
        (dev,) = n["devices"]
        assert dev["device"] == "cpu" and dev["intervals"] >= 2, (node, dev)
        names = {
            r["name"]: r for r in json.loads((run / node / "burnin.json").read_text())["records"]
        }
        assert names["burnin_compute_drop"]["status"] in ("pass", "fail")
        assert names["burnin_throttle"]["status"] == "skip", names["burnin_throttle"]
        assert "the CPU has no NVML" in names["burnin_throttle"]["message"]
    assert "## Burn-in" in (run / "summary.md").read_text()


def test_a_node_held_by_another_run_is_named_and_nothing_starts(
    repo_root: Path, tmp_path: Path
) -> None:
    """Two verifies on the same nodes (from two checkouts): the second waits
    verify_lock_wait, then stops naming the run that holds the node."""
    held = _lock(tmp_path, "n2", "other-run", age_s=30)
    inv = write_inventory(tmp_path)
    rc, out = run_playbook("verify.yml", inv, "-e", "verify_run_id=t2", "-e", "verify_lock_wait=0")
    said = " ".join(out.split())
    assert rc != 0
    assert (
        "n2: another verify runs on this node (run other-run from otherhost:/other/checkout" in said
    )
    assert held.exists() and (held / "owner").read_text().startswith("other-run "), "not ours"
    assert not (tmp_path / "work" / "t2" / "n1" / "allreduce.json").exists()
    assert not (tmp_path / "work" / ".lock.n1").exists(), "n1 released its own lock"


def test_broken_node_is_named_and_nothing_launches(repo_root: Path, tmp_path: Path) -> None:
    rc, out, summary, run = _play(
        repo_root, tmp_path, n2_extra="verify_python: /nonexistent/bin/python"
    )
    assert rc != 0
    assert summary["status"] == "fail"
    fails = {(f["node"], f["name"]) for f in summary["failures"]}
    assert ("n2", "ansible:node") in fails
    msg = next(f["message"] for f in summary["failures"] if f["name"] == "ansible:node")
    assert "/nonexistent/bin/python" in msg
    assert "Stop on a node that cannot run verify" in msg, "names the failed task"
    assert "cannot import torch or gpufleet" in msg, "says why"
    assert "Cluster all-reduce not launched: node(s) n2 failed" in out
    assert not (run / "n1" / "allreduce.json").exists()


def test_truncated_manifest_is_named_and_nothing_launches(repo_root: Path, tmp_path: Path) -> None:
    """A manifest cut off mid-way stops its node in prepare with node, file and fix (issue 17),
    not a bare from_json error."""
    cut = tmp_path / "manifest.json"
    cut.write_text('{"schema": 1, "env_python": "/opt/gpufleet/env/bin/py')
    rc, out, summary, run = _play(repo_root, tmp_path, n2_extra=f"verify_manifest_file: {cut}")
    assert rc != 0
    said = " ".join(out.split())  # the yaml callback wraps long messages
    assert f"n2: {cut} is not valid JSON (truncated?)" in said, out[-3000:]
    assert "run `make provision` (it rebuilds the manifest)" in said
    assert summary["status"] == "fail"
    assert ("n2", "ansible:node") in {(f["node"], f["name"]) for f in summary["failures"]}
    assert "Cluster all-reduce not launched: node(s) n2 failed" in out
    assert not (run / "n1" / "allreduce.json").exists()


def test_a_node_that_breaks_the_all_reduce_is_named_by_bisection(tmp_path: Path) -> None:
    """Three local nodes; n3's ranks cannot find their gloo interface (set in its launch
    environment only, so the pre-check passes): the cluster run fails, bisection reruns it
    on [n1, n2], which passes, and names n3 after one launch."""
    wrapper = tmp_path / "py-bad-gloo"
    wrapper.write_text(f'#!/bin/sh\nGLOO_SOCKET_IFNAME=bogus0 exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    inv = write_inventory(tmp_path, n3_extra=f"verify_python: {wrapper}")
    rc, out = run_playbook("verify.yml", inv, "-e", "verify_run_id=b1", "-e", "verify_run_train=false",
                           "-e", "verify_collective_timeout=20", "-e", "verify_rdzv_timeout=20",
                           *NOT_ASKED)  # fmt: skip
    run = tmp_path / "rep" / "b1"
    summary = json.loads((run / "summary.json").read_text())
    assert rc != 0
    assert summary["suspect_nodes"] == ["n3"], summary["suspect_reason"]
    assert summary["suspect_reason"] == "bisection, 1 launch"
    (group,) = summary["bisect"]
    assert (group["nodes"], group["passed"], group["kind"]) == (["n1", "n2"], True, "bisect-1-0")
    assert (run / "n1" / "bisect-1-0.json").is_file() and not (
        run / "n3" / "bisect-1-0.json"
    ).exists()
    assert "Node(s) at fault (bisection, 1 launch): n3" in out


def test_a_lock_left_by_an_earlier_run_of_this_checkout_is_taken_over(
    repo_root: Path, tmp_path: Path
) -> None:
    """A node that dropped out of a run (unreachable) keeps that run's lock. The next make
    verify of the same checkout holds the controller lock, so that run is over: the lock
    is taken over at once instead of waiting verify_lock_wait (the make faults sequence
    link cut -> rank killed found this)."""
    import socket

    lock = tmp_path / "work" / ".lock.n2"
    lock.mkdir(parents=True)
    ours = f"{socket.gethostname()}:{repo_root}"
    (lock / "owner").write_text(f"lost-run {int(time.time()) - 30} {ours}\n")
    inv = write_inventory(tmp_path)
    quick = ("-e", "verify_run_checks=false", "-e", "verify_run_smoke=false",
             "-e", "verify_run_train=false", "-e", "verify_lock_wait=0", *NOT_ASKED)  # fmt: skip
    # a plain ansible-playbook run does not hold the controller lock: the lock is respected
    rc, out = run_playbook("verify.yml", inv, "-e", "verify_run_id=t3", *quick)
    assert rc != 0 and "another verify runs on this node (run lost-run" in " ".join(out.split())
    # gpufleet verify's run (it holds reports/.verify.lock) takes it over
    rc, out = run_playbook(
        "verify.yml", inv, "-e", json.dumps({"verify_run_id": "t4", "__verify_controller_locked": True}),
        *quick,
    )  # fmt: skip
    assert rc == 0, out[-5000:]
    assert "taken over from run lost-run of this checkout, which is over" in out
    assert not lock.exists(), "released at the end of the run"
