"""End to end on the simulated cluster: `make demo` (testbed up, provision, verify), a second
`make provision` that must change nothing, then on the same testbed `make demo
LAUNCHER=slurm` (Slurm added, verify's cluster steps as Slurm jobs), the health check as
slurmd's HealthCheckProgram (drain, resume, an admin's drain left alone) and a job Slurm
cannot schedule, then `make testbed-down`.

Needs root and the testbed tools (`make testbed-deps`); runs in `make e2e` and in CI. Phase
times are written to reports/e2e-timings.json (and printed with `-s`), never asserted;
docs/performance.md records them.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "testbed"))

from tbctl import config, nodes  # noqa: E402

import testbed_lib as tb  # noqa: E402

# cold: debootstrap + mirror + 3 first provisions + verify + rerun; pyproject's 600 s
# default is for ordinary tests
pytestmark = tb.cluster_marks(timeout=3600, tools=("debootstrap", "rpmbuild"))

RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


TIMINGS: dict[str, float] = {}


def make(*args: str, timeout: float = 2400) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    took = time.monotonic() - start
    print(f"\n[e2e] make {' '.join(args)}: rc={proc.returncode} in {took:.0f} s")
    TIMINGS[" ".join(args)] = round(took, 1)
    out = REPO / "reports" / "e2e-timings.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(TIMINGS, indent=2) + "\n")
    return proc, took


def recap(output: str) -> dict[str, tuple[int, int, int, int]]:
    """Last PLAY RECAP of the output: host -> (ok, changed, unreachable, failed)."""
    last = output.rsplit("PLAY RECAP", 1)[-1]
    return {m[0]: (int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in RECAP.findall(last)}


def check_cluster_rows_from_raw_timings(n: int) -> None:
    """The cluster rows, recomputed from every rank's raw per-iteration timings and byte counts
    (nccl-tests formulas written out here, not gpufleet.verify.bandwidth), and the exact reduced values."""
    rf = json.loads((REPO / "reports/latest/node1/allreduce.json").read_text())
    raw = {r["rank"]: {x["size_bytes"]: x for x in r["sizes"]} for r in rf["meta"]["raw"]}
    w = len(raw)
    assert sorted(raw) == list(range(w)) and w == 2 * n
    assert rf["bandwidth"]
    for row in rf["bandwidth"]:
        per_rank = [raw[k][row["size_bytes"]] for k in range(w)]
        assert all(x["reduced_min"] == x["reduced_max"] == w * (w + 1) / 2 for x in per_rank)
        t = max(sum(x["iter_s"]) / len(x["iter_s"]) for x in per_rank)
        assert row["algbw"] == pytest.approx(row["size_bytes"] / t / 1e9, rel=1e-3, abs=1e-4)


def check_training_record(summary: dict[str, Any], n: int) -> None:
    """One torchrun training job over all nodes: loss down, identical parameters, every
    sample once per epoch, per-rank throughput and the scaling efficiency (recomputed)."""
    t = summary["training"]
    assert t is not None, "no cluster training record"
    assert (t["nnodes"], t["world_size"], t["backend"]) == (n, 2 * n, "gloo")
    assert t["epoch_loss"][-1] < t["epoch_loss"][0]
    assert t["params_max_diff"] == 0.0
    assert t["statuses"] == {
        "train_loss_decreases": "pass",
        "train_params_identical": "pass",
        "train_samples_once_per_epoch": "pass",
        "train_syncbn_global_stats": "skip",
        "train_amp": "skip",
    }
    rf = json.loads((REPO / "reports/latest/node1/train.json").read_text())["meta"]
    hosts = {r["host"] for r in rf["ranks"]}
    assert len(hosts) == n, f"ranks ran on {hosts}"
    size = rf["dataset_size"]
    for epoch in map(str, range(rf["epochs"])):
        seen = sorted(i for r in rf["ranks"] for i in r["indices"][epoch])
        assert seen == list(range(size)), f"epoch {epoch}: not every sample exactly once"
    total = sum(r["samples_per_s"] for r in rf["ranks"])
    base = json.loads((REPO / "reports/latest/node1/train-1node.json").read_text())["meta"]
    base_total = sum(r["samples_per_s"] for r in base["ranks"])
    assert base["world_size"] == 2 and base["nnodes"] == 1
    assert t["efficiency"] == pytest.approx(total / (n * base_total), rel=1e-6)
    md = (REPO / "reports/latest/summary.md").read_text()
    assert "## Cluster training" in md and "scaling efficiency" in md


def check_honest_skips(summary: dict[str, Any], n: int) -> None:
    """CPU nodes cannot run DataParallel or SyncBatchNorm: skip with the reason, never pass."""
    feats = {f["feature"]: f for f in summary["features"]}
    for name, reason in (
        ("DataParallel", "at least 2 CUDA devices"),
        ("SyncBatchNorm (one node)", "needs an accelerator"),
        ("SyncBatchNorm (cluster training)", "needs an accelerator"),
    ):
        assert feats[name]["ran"] == [], name
        assert feats[name]["skipped"] and all(reason in k["reason"] for k in feats[name]["skipped"])
    assert {w["world_size"] for w in feats["DDP training (cluster)"]["ran"]} == {2 * n}


def check_cluster_junit(n: int) -> None:
    """reports/<run>/junit.xml: valid against the JUnit XSD CI systems read, one suite per
    node and per cluster step that ran, none failing on a passing run."""
    etree: Any = importlib.import_module("lxml.etree")
    run = (REPO / "reports/latest").resolve()
    xsd = etree.XMLSchema(etree.parse(str(REPO / "tests/fixtures/junit/junit.xsd")))
    doc = etree.parse(str(run / "junit.xml"))
    assert xsd.validate(doc), xsd.error_log
    names = [s.get("name") for s in doc.getroot()]
    assert names[:n] == [f"node.node{i}" for i in range(1, n + 1)], names
    assert {"cluster.all-reduce", "cluster.training"} <= set(names[n:]), names
    assert all(s.get("failures") == "0" and s.get("errors") == "0" for s in doc.getroot())


def check_make_run(n: int) -> None:
    """make run: a plain DDP script (no gpufleet import) on every node, then one failing rank."""
    script = "tests/fixtures/run/plain_ddp.py"
    ok, _ = make("run", "INVENTORY=testbed/inventory", f"SCRIPT={script}", "ARGS=--steps 10",
                 "RUN_ID=e2e-run-ok")  # fmt: skip
    assert ok.returncode == 0, (ok.stdout + ok.stderr)[-6000:]
    run = REPO / "reports" / "e2e-run-ok"
    for rank in range(2 * n):
        log = run / f"node{rank // 2 + 1}" / f"run-rank{rank}.log"
        text = log.read_text()
        assert f"plain_ddp rank {rank}/{2 * n} on" in text and "all ranks: True" in text
    bad, _ = make("run", "INVENTORY=testbed/inventory", f"SCRIPT={script}",
                  f"ARGS=--fail-rank {2 * n - 1}", "RUN_ID=e2e-run-fail")  # fmt: skip
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert f"node{n}: rank {2 * n - 1} (local rank 1) exited with 1" in out, out[-6000:]
    assert "RuntimeError: rank" in " ".join(out.split()), out[-6000:]  # its own error line


@pytest.fixture(scope="module")
def torn_down_after() -> Iterator[None]:
    """The demo's testbed stays up between the tests of this module (the Slurm demo runs on
    it), then `make testbed-down` must leave nothing behind."""
    yield
    down, _ = make("testbed-down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert nodes.our_netns() == []
    assert nodes.our_links() == []
    assert nodes.our_mounts(config.STATE_DIR) == []


def test_demo_provisions_verifies_and_reruns_without_change(torn_down_after: None) -> None:
    n = 3
    demo, _ = make("demo", f"NODES={n}")
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out[-8000:]
    summary = json.loads((REPO / "reports/latest/summary.json").read_text())
    assert summary["status"] == "pass" and summary["launcher"] == "ssh"
    assert summary["slurm_jobs"] == []
    assert sorted(summary["nodes"]) == [f"node{i}" for i in range(1, n + 1)]
    # the cluster all-reduce ran across every node (gloo, CPU): world = nodes x ranks
    cluster = [r for r in summary["bandwidth"] if r["source"] == "allreduce"]
    assert cluster, "no cluster all-reduce rows in the report"
    for row in cluster:
        w = row["world_size"]
        assert w >= n and w % n == 0 and row["backend"] == "gloo" and row["wrong"] == 0
        assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (w - 1) / w, rel=1e-3)
    assert ">> report:" in out and ": pass" in out
    check_cluster_rows_from_raw_timings(n)
    check_training_record(summary, n)
    check_honest_skips(summary, n)
    check_cluster_junit(n)
    check_make_run(n)

    again, _ = make("provision", "INVENTORY=testbed/inventory")
    rerun = recap(again.stdout)
    assert again.returncode == 0, again.stdout[-8000:]
    assert sorted(rerun) == [f"node{i}" for i in range(1, n + 1)]
    for host, (_, changed, unreachable, failed) in rerun.items():
        assert (changed, unreachable, failed) == (0, 0, 0), f"{host}: {rerun[host]}"
    assert "runs in full" not in again.stdout, "the converged rerun did not take the fast path"
    check_fast_path_sees_drift(n)


def _provision(*extra: str) -> tuple[str, dict[str, tuple[int, int, int, int]]]:
    run, _ = make("provision", "INVENTORY=testbed/inventory", *extra)
    assert run.returncode == 0, run.stdout[-8000:]
    return run.stdout, recap(run.stdout)


def check_fast_path_sees_drift(n: int) -> None:
    """The converged fast path (docs/performance.md): drift on one node runs the roles it
    touches in full there, and only there; FULL=1 runs every role in full, changing nothing."""
    hosts = [f"node{i}" for i in range(1, n + 1)]
    env_file, site = "/etc/gpufleet/nccl.env", "/opt/gpufleet/env/lib/python3.11/site-packages"
    before = node_sh("node2", f"cat {env_file}").stdout
    drift = node_sh(
        "node2", f"echo NCCL_DEBUG=TRACE >> {env_file} && mkdir {site}/stray-1.0.dist-info"
    )
    assert drift.returncode == 0, drift.stderr
    out, rec = _provision()
    full = re.findall(r"(node\d): (\w+) runs in full: (.*)", out)
    assert {(h, role) for h, role, _ in full} == {
        ("node2", "cluster_network"),
        ("node2", "torch_env"),
        ("node2", "slurm_health"),  # it watches the env's packages too
    }, full
    reasons = {role: why for _, role, why in full}
    assert "drifted" in reasons["cluster_network"] and env_file in reasons["cluster_network"], (
        reasons
    )
    assert "site-packages" in reasons["torch_env"], reasons
    assert node_sh("node2", f"cat {env_file}").stdout == before, (
        "the full run did not restore nccl.env"
    )
    assert rec["node2"][1] >= 1 and all(rec[h][1] == 0 for h in hosts if h != "node2"), rec
    node_sh("node2", f"rmdir {site}/stray-1.0.dist-info")  # pip does not remove a stranger's dir
    _provision()  # torch_env records the env without the stray entry
    out, rec = _provision()
    assert "runs in full" not in out and all(rec[h][1:] == (0, 0, 0) for h in hosts), rec
    # a limited rerun reports on the nodes it ran on, not the others as failed
    limited = tb.playbook("provision.yml", "--limit", "node1")
    assert limited.rc == 0, limited.out[-4000:]
    assert "node1 provisioned" in limited.out and "FAILED" not in limited.out, limited.out[-2000:]
    out, rec = _provision("FULL=1")
    assert len(re.findall(r"runs in full: fast path off", out)) == 7 * n, out[-4000:]
    assert all(rec[h][1:] == (0, 0, 0) for h in hosts), rec


# --------------------------------------------------------------------------- Slurm


def node_sh(name: str, script: str) -> subprocess.CompletedProcess[str]:
    """A command inside a testbed node (its namespaces, no SSH)."""
    return tb.node_sh(tb.by_name(name), script)


def slurm_node(name: str) -> dict[str, str]:
    """`scontrol show node -o` on the controller node, as a dict (gpufleet.verify.launchers.slurm's parser)."""
    from gpufleet.verify.launchers.slurm import parse_show_line

    r = node_sh("node1", f"scontrol show node -o {name}")
    assert r.returncode == 0, r.stderr
    return parse_show_line(r.stdout)


def test_demo_through_slurm_drains_a_sick_node_and_cancels_what_cannot_start(
    torn_down_after: None,
) -> None:
    """make demo LAUNCHER=slurm on the demo's testbed (Slurm added by testbed-up), then the
    health check as slurmd's HealthCheckProgram, then a job Slurm cannot schedule."""
    n = 3
    demo, _ = make("demo", f"NODES={n}", "LAUNCHER=slurm")
    out = demo.stdout + demo.stderr
    assert demo.returncode == 0, out[-8000:]
    summary = json.loads((REPO / "reports/latest/summary.json").read_text())
    assert summary["status"] == "pass" and summary["launcher"] == "slurm"
    jobs = {j["step"]: j for j in summary["slurm_jobs"]}
    # the pair sweep on 3 nodes: one pair per round, 3 rounds, a Slurm job each
    pairs = {"pair-1-0", "pair-2-0", "pair-3-0"}
    assert set(jobs) == {"allreduce", "train-1node", "train", *pairs}, jobs
    for step, job in jobs.items():
        assert job["state"] == "COMPLETED" and job["exit_code"] == 0 and job["ok"], (step, job)
        assert str(job["job_id"]).isdigit()
    assert len({j["job_id"] for j in jobs.values()}) == len(jobs)  # a Slurm job per step
    assert jobs["allreduce"]["nodes"] == "node[1-3]"
    cluster = [r for r in summary["bandwidth"] if r["source"] == "allreduce"]
    assert cluster and all(r["world_size"] == 2 * n and r["wrong"] == 0 for r in cluster)
    check_training_record(summary, n)
    md = (REPO / "reports/latest/summary.md").read_text()
    assert "launcher slurm" in md and str(jobs["allreduce"]["job_id"]) in md
    # the role wrote the HealthCheck lines (the testbed inventory asks it to) on every node
    for i in range(1, n + 1):
        conf = node_sh(f"node{i}", "cat /etc/slurm/slurm.conf").stdout
        assert "HealthCheckProgram=/usr/local/sbin/gpufleet-healthcheck" in conf
        assert "HealthCheckInterval=15" in conf

    # -- make run LAUNCHER=slurm: the user's plain DDP script as one Slurm job
    ran, _ = make("run", "INVENTORY=testbed/inventory", "SCRIPT=tests/fixtures/run/plain_ddp.py",
                  "ARGS=--steps 10", "LAUNCHER=slurm", "RUN_ID=e2e-run-slurm")  # fmt: skip
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-6000:]
    for rank in range(2 * n):
        text = (
            REPO / "reports/e2e-run-slurm" / f"node{rank // 2 + 1}" / f"run-rank{rank}.log"
        ).read_text()
        assert f"plain_ddp rank {rank}/{2 * n} on" in text and "all ranks: True" in text
    job = json.loads((REPO / "reports/e2e-run-slurm/node1/slurm-run.json").read_text())
    assert job["meta"]["state"] == "COMPLETED" and job["records"][0]["status"] == "pass"

    # -- a sick node: nccl.env names an interface node2 lacks; slurmd's next health-check
    # run drains exactly node2 with the check as the reason, and resumes it after the fix
    env_file = "/etc/gpufleet/nccl.env"
    node_sh("node2", f"cp {env_file} /root/nccl.env.good && "
                     f"sed -i 's/^GLOO_SOCKET_IFNAME=.*/GLOO_SOCKET_IFNAME=bogus0/' {env_file}")  # fmt: skip
    took = tb.wait_for(lambda: "DRAIN" in slurm_node("node2").get("State", ""), 90, "node2 drained")
    reason = slurm_node("node2")["Reason"]
    assert reason.startswith("gpufleet: nccl_env_interfaces: ") and "bogus0" in reason, reason
    for other in ("node1", "node3"):
        assert "DRAIN" not in slurm_node(other)["State"], other
    print(f"\n[e2e] node2 drained {took:.0f} s after nccl.env broke: {reason}")
    node_sh("node2", f"cp /root/nccl.env.good {env_file}")
    took = tb.wait_for(lambda: "DRAIN" not in slurm_node("node2")["State"], 90, "node2 resumed")
    print(f"[e2e] node2 resumed {took:.0f} s after the fix")

    # -- bisection under Slurm: node3's ranks cannot find their gloo interface (set in its
    # launch environment only, so the pre-check passes); the reruns are Slurm jobs too
    bad_gloo = (
        "#!/bin/sh\n"
        '[ "$(hostname)" = node3 ] && export GLOO_SOCKET_IFNAME=bogus0\n'
        'exec /opt/gpufleet/env/bin/python "$@"\n'
    )
    for i in range(1, n + 1):
        wrapper = tb.node_file(tb.by_name(f"node{i}"), "/root/py-bad-gloo")
        wrapper.write_text(bad_gloo)
        wrapper.chmod(0o755)
    bis, _ = make(
        "verify", "INVENTORY=testbed/inventory", "LAUNCHER=slurm", "RUN_ID=e2e-slurm-bisect",
        "VERIFY_ARGS=-e verify_python=/root/py-bad-gloo -e verify_run_checks=false "
        "-e verify_run_smoke=false -e verify_run_train=false -e verify_collective_timeout=20 "
        "-e verify_rdzv_timeout=20",
    )  # fmt: skip
    assert bis.returncode != 0
    s = json.loads((REPO / "reports/e2e-slurm-bisect/summary.json").read_text())
    assert s["suspect_nodes"] == ["node3"], (s["suspect_reason"], s["bisect"])
    assert s["bisect_reason"].startswith("bisection")
    steps = {j["step"] for j in s["slurm_jobs"]}
    assert "allreduce" in steps and any(x.startswith("bisect-1-") for x in steps), steps

    # -- an admin's drain is never undone by gpufleet's (passing) health checks
    node_sh("node1", "scontrol update nodename=node3 state=drain reason='maintenance: e2e'")
    time.sleep(35)  # two HealthCheckInterval periods
    held = slurm_node("node3")
    assert "DRAIN" in held["State"] and held["Reason"].startswith("maintenance: e2e"), held
    node_sh("node1", "scontrol update nodename=node3 state=resume")

    # -- a node down: the all-reduce job cannot start, is cancelled at the start limit and
    # reported naming node3; no bisection reruns wait again
    node_sh("node3", "systemctl stop slurmd")
    node_sh("node1", "scontrol update nodename=node3 state=down reason='e2e: node down'")
    try:
        limit = 20
        start = time.monotonic()
        bad, _ = make(
            "verify", "INVENTORY=testbed/inventory", "LAUNCHER=slurm", "RUN_ID=e2e-slurm-down",
            f"VERIFY_ARGS=-e verify_slurm_start_timeout={limit} -e verify_run_checks=false "
            "-e verify_run_smoke=false",
        )  # fmt: skip
        took = time.monotonic() - start
        assert bad.returncode != 0
        s = json.loads((REPO / "reports/e2e-slurm-down/summary.json").read_text())
        job = next(j for j in s["slurm_jobs"] if j["step"] == "allreduce")
        assert job["state"] == "CANCELLED" and job["cancelled"], job
        assert job["started_after_s"] is None and "node3" in (job["reason"] or ""), job
        assert s["suspect_nodes"] == ["node3"] and "Slurm" in s["suspect_reason"]
        assert s["bisect"] == [] and s["training"] is None
        assert not [j for j in s["slurm_jobs"] if j["step"] != "allreduce"]
        print(f"[e2e] unschedulable job cancelled and reported; verify took {took:.0f} s")
        assert took < limit + 150, f"verify took {took:.0f} s with a {limit} s start limit"
        queue = node_sh("node1", "squeue -h -o '%i %T'").stdout.strip()
        assert queue == "", f"jobs left in the queue: {queue}"
    finally:
        node_sh("node3", "systemctl start slurmd")
        node_sh("node1", "scontrol update nodename=node3 state=resume")
