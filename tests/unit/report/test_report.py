"""Aggregation of a verify run (gpufleet.report)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import pytest

from gpufleet import report
from gpufleet.cli import main
from gpufleet.commands import cmd_report as cmd
from gpufleet.errors import RefusedError
from gpufleet.report.logscan import first_error_note
from gpufleet.results import Record, ResultFile, Status
from gpufleet.verify import bandwidth as bench

JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest">
<testcase classname="checks.test_gpu" name="test_gpu_count"/>
<testcase classname="checks.test_gpu" name="test_ecc">
<failure message="2 uncorrectable"/></testcase>
<testcase classname="checks.test_gpu" name="test_nvlink"><skipped message="no NVLink"/></testcase>
</testsuite></testsuites>"""


def _smoke(node: str, status: Status = "pass", n: int = 3) -> ResultFile:
    rows = [bench.make_row(s, "float32", s / 1e9, n, "gloo") for s in (4096, 2**20)]
    return ResultFile(
        kind="smoke",
        node=node,
        mode="cpu",
        started="2026-01-01T00:00:00Z",
        records=[
            Record("test_ddp_loss_decreases", status, node=node, message="loss", remedy="do X")
        ],
        bandwidth=rows,
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "reports" / "r1"
    _smoke("n1").write(d / "n1" / "smoke.json")
    (d / "n2").mkdir(parents=True)
    (d / "n2" / "checks.xml").write_text(JUNIT)
    (d / "n2" / "allreduce.log").write_text("...\nERROR: torchrun ran past 300s and was killed\n")
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r1",
                "nodes": ["n1", "n2", "n3"],
                "mode": "cpu",
                "expect": {"smoke": ["n1"], "allreduce": ["n2"], "checks": ["n3"]},
            }
        )
    )
    return d


def test_collect_turns_missing_results_into_named_failures(run_dir: Path) -> None:
    s = report.collect(run_dir)
    fails = {(n, r.name) for n, _k, r in s.failures()}
    assert ("n2", "checks:test_ecc") in fails  # from JUnit when no JSON
    assert ("n2", "allreduce:result") in fails  # expected, absent, log tail explains
    assert ("n3", "checks:result") in fails  # node gave nothing at all
    n2 = next(r for n, _k, r in s.failures() if n == "n2" and r.name == "allreduce:result")
    assert "ran past 300s" in n2.message
    assert "firewalld" in n2.remedy
    assert s.exit_code == 1
    assert s.status == "fail"


def test_write_report_renders_every_summary_file(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["report", "summary", str(run_dir), "--latest"])
    assert rc == 1
    for name in report.SUMMARY_FILES:
        assert (run_dir / name).stat().st_size > 0, name
    page = (run_dir / "index.html").read_text()
    assert page.startswith("<!doctype html>") and "<b>FAIL</b>" not in page
    assert '<div class="big">FAIL</div>' in page and 'data-node="n2"' in page
    data = json.loads((run_dir / "summary.json").read_text())
    assert data["status"] == "fail"
    assert data["exit_code"] == 1
    assert data["counts"]["fail"] == 3
    assert data["counts"]["skip"] == 1
    assert data["busbw_factors"] == {"3": pytest.approx(4 / 3, rel=1e-5)}
    for row in data["bandwidth"]:
        assert row["busbw"] == pytest.approx(row["algbw"] * 4 / 3, rel=1e-3)
    md = (run_dir / "summary.md").read_text()
    assert "## Failures" in md
    assert "n3" in md
    assert "[index.html](index.html)" in md and "index.html#bandwidth" in md
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert "n2" in out
    assert "summary.md" in out
    assert (run_dir.parent / "latest").resolve() == run_dir.resolve()


def test_all_pass_exits_zero(tmp_path: Path) -> None:
    d = tmp_path / "r2"
    _smoke("n1").write(d / "n1" / "smoke.json")
    assert main(["report", str(d), "--quiet", "--no-plot"]) == 0  # summary is the default
    assert json.loads((d / "summary.json").read_text())["status"] == "pass"


def test_run_info_from_stdin_is_written_before_the_report_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verify passes run.json on stdin to the same command that renders the report: an
    # expected node without results must fail the report that very run
    import io

    d = tmp_path / "r4"
    _smoke("n1").write(d / "n1" / "smoke.json")
    info = {"run_id": "r4", "nodes": ["n1", "n2"], "mode": "cpu", "expect": {"smoke": ["n1", "n2"]}}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(info)))
    assert main(["report", "summary", str(d), "--run-info", "-", "--quiet", "--no-plot"]) == 1
    assert json.loads((d / "run.json").read_text()) == info
    assert json.loads((d / "summary.json").read_text())["status"] == "fail"


@pytest.mark.parametrize("text", ["[1, 2]", "{not json"])
def test_run_info_that_is_not_an_object_is_refused_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    import io

    d = tmp_path / "r5"
    _smoke("n1").write(d / "n1" / "smoke.json")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["report", "summary", str(d), "--run-info", "-", "--quiet", "--no-plot"]) != 0
    assert "--run-info -" in capsys.readouterr().err
    assert not (d / "run.json").exists() and not (d / "summary.json").exists()


def test_unreadable_result_file_fails(tmp_path: Path) -> None:
    d = tmp_path / "r3" / "n1"
    d.mkdir(parents=True)
    (d / "smoke.json").write_text('{"schema": 99}')
    s = report.collect(d.parent)
    assert [r.name for _n, _k, r in s.failures()] == ["smoke:result"]


def test_missing_run_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="not a directory"):
        report.collect(tmp_path / "nope")


def _write_group(d: Path, kind: str, nodes: list[str], ok: bool) -> None:
    for node in nodes:
        ResultFile(
            kind=kind,
            node=node,
            mode="gpu",
            started="t",
            records=[Record("allreduce_busbw", "pass" if ok else "fail", node=node)],
        ).write(d / node / f"{kind}.json")


def test_bisection_analysis_reads_the_group_files_and_names_the_node(tmp_path: Path) -> None:
    """The report does not trust the playbook's pass/fail: it re-reads each group's files."""
    d = tmp_path / "r4"
    nodes = [f"n{i}" for i in range(6)]
    history: list[list[dict[str, object]]] = []
    while groups := report.next_groups(nodes, history):
        rnd = len(history) + 1
        results = []
        for i, g in enumerate(groups):
            ok = "n4" not in g
            _write_group(d, f"bisect-{rnd}-{i}", g, ok)
            results.append({"nodes": g, "passed": ok})
        history.append(results)
    (d / "run.json").write_text(
        json.dumps({"nodes": nodes, "bisect": [[r["nodes"] for r in h] for h in history]})
    )
    s = report.collect(d)
    assert s.suspects == ["n4"]
    launches = sum(len(h) for h in history)
    assert f"Node(s) at fault (bisection, {launches} launches): n4" in report.table(s)
    assert launches <= 2 * math.ceil(math.log2(len(nodes)))
    # a group whose files say fail although the playbook thought it passed: the files win
    _write_group(d, "bisect-1-0", ["n0"], ok=False)
    s = report.collect(d)
    assert s.suspects == nodes and "both halves fail" in s.suspect_reason


def test_report_subcommand_registers() -> None:
    p = argparse.ArgumentParser()
    cmd.register(p.add_subparsers(dest="command"))
    args = p.parse_args(["report", "summary", "reports/x", "--no-plot"])
    assert args.func is cmd.run_summary
    assert args.no_plot
    args = p.parse_args(["report", "root-cause", "x.log"])
    assert args.func is cmd.run_root_cause


LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def test_root_cause_names_the_rank_a_signal_killed() -> None:
    # torchrun's own output on the testbed node whose rank was SIGKILLed (tests/integration/test_faults.py)
    cause = report.root_cause((LOGS / "torchrun-rank-sigkill.log").read_text())
    assert cause == {
        "host": "node2",
        "time": "2026-11-30_18:10:36",
        "rank": 3,
        "local_rank": 1,
        "exitcode": -9,
        "signal": "SIGKILL",
    }


def test_root_cause_of_a_peer_that_failed_by_itself_has_no_signal() -> None:
    cause = report.root_cause((LOGS / "torchrun-peer-gone.log").read_text())
    assert cause["exitcode"] == 1 and "signal" not in cause
    assert report.root_cause("no torchrun output here") == {}


def test_a_signal_killed_rank_makes_its_node_the_suspect(tmp_path: Path) -> None:
    run = tmp_path / "r1"
    for node, log in (("node1", "torchrun-peer-gone.log"), ("node2", "torchrun-rank-sigkill.log")):
        (run / node).mkdir(parents=True)
        (run / node / "allreduce.log").write_text((LOGS / log).read_text())
    (run / "run.json").write_text(
        json.dumps({"run_id": "r1", "nodes": ["node1", "node2"], "expect": {}, "pairs": []})
    )
    s = report.collect(run)
    assert s.suspects == ["node2"] and s.suspect_reason == "killed by a signal"
    assert "Node(s) at fault (killed by a signal): node2" in report.table(s)
    msgs = [r.message for r in s.nodes["node2"].records if r.name == "allreduce:signal"]
    assert msgs and "killed by SIGKILL" in msgs[0]
    assert not [r for r in s.nodes["node1"].records if r.name == "allreduce:signal"]


# --------------------------------------------------------------------------- command line
def test_root_cause_subcommand_prints_the_cause_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["report", "root-cause", str(LOGS / "torchrun-rank-sigkill.log")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["host"], out["rank"], out["signal"]) == ("node2", 3, "SIGKILL")


def test_root_cause_of_a_missing_log_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "allreduce.log"
    assert main(["report", "root-cause", str(missing)]) == 1
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err.startswith(f"ERROR: cannot read {missing}: ")
    assert cap.err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"run_id": "r", "nodes": ["n1"', "not valid JSON"),
        ('["n1", "n2"]', "expected a JSON object, got list"),
        ('{"nodes": "n1"}', "'nodes' must be a JSON array"),
        ('{"expect": ["n1"]}', "'expect' must be a JSON object"),
        ('{"dropped": "n1"}', "'dropped' must be a JSON object"),
    ],
)
def test_corrupt_run_json_is_exit_1_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str
) -> None:
    d = tmp_path / "r9"
    _smoke("n1").write(d / "n1" / "smoke.json")
    (d / "run.json").write_text(content)
    assert main(["report", "summary", str(d), "--no-plot"]) == 1
    cap = capsys.readouterr()
    assert cap.err.startswith(f"ERROR: {d / 'run.json'}: ")
    assert says in cap.err
    assert cap.err.count("\n") == 1
    assert "Traceback" not in cap.err
    assert not (d / "summary.json").exists()


def test_a_run_dir_that_is_not_a_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_file_of_another_run_never_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two verifies given the same folder (or a stale file left behind): a file whose run id
    is not this run's is a failure, never a pass (issue 17: false pass)."""
    run = tmp_path / "r2"
    (run / "n1").mkdir(parents=True)
    (run / "n2").mkdir(parents=True)
    info = {"run_id": "r2", "nodes": ["n1", "n2"], "expect": {"smoke": ["n1", "n2"]},
            "result_run_ids": True}  # fmt: skip
    (run / "run.json").write_text(json.dumps(info))
    monkeypatch.setenv("GPUFLEET_RUN_ID", "r2")
    _smoke("n1").write(run / "n1" / "smoke.json")
    monkeypatch.setenv("GPUFLEET_RUN_ID", "r1")  # an earlier run wrote n2's file
    _smoke("n2").write(run / "n2" / "smoke.json")
    monkeypatch.delenv("GPUFLEET_RUN_ID")
    s = report.collect(run)
    assert s.status == "fail"
    (fail,) = s.failures()
    node, _kind, rec = fail
    assert (node, rec.name) == ("n2", "smoke:result")
    assert "written by run r1, not by this run r2" in rec.message
    assert [f.run_id for f in s.nodes["n1"].files] == ["r2"]


def test_a_file_without_run_id_does_not_count_in_a_stamped_run(tmp_path: Path) -> None:
    run = tmp_path / "r3"
    (run / "n1").mkdir(parents=True)
    (run / "run.json").write_text(
        json.dumps({"run_id": "r3", "nodes": ["n1"], "expect": {}, "result_run_ids": True})
    )
    _smoke("n1").write(run / "n1" / "smoke.json")  # no GPUFLEET_RUN_ID in this process
    ((_, _, rec),) = report.collect(run).failures()
    assert "written by run (none)" in rec.message


def _slurm_record(step: str, **meta: object) -> ResultFile:
    ok = meta.get("state") == "COMPLETED"
    return ResultFile(
        kind=f"slurm-{step}",
        node="node1",
        mode="slurm",
        started="2026-01-01T00:00:00Z",
        records=[
            Record("slurm_job", "pass" if ok else "fail", node="node1", value=meta.get("job_id"))
        ],
        meta={"launcher": "slurm", "step": step, **meta},
    )


def test_a_slurm_run_reports_its_jobs_and_the_nodes_slurm_withheld(tmp_path: Path) -> None:
    d = tmp_path / "r2"
    _slurm_record("allreduce", job_id="17", state="CANCELLED", started_after_s=None,
                  reason="ReqNodeNotAvail,_UnavailableNodes:gpu[07-08]", cancelled=True,
                  cancel_reason="still PENDING after 20s").write(d / "h1" / "slurm-allreduce.json")  # fmt: skip
    (d / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r2",
                "launcher": "slurm",
                "nodes": ["h1", "h7", "h8"],
                "slurm_names": {"h1": "gpu01", "h7": "gpu07", "h8": "gpu08"},
                "expect": {},
            }
        )
    )
    s = report.collect(d)
    assert s.suspects == ["h7", "h8"]  # Slurm's names mapped back to the inventory's
    assert "Slurm did not make them available" in s.suspect_reason
    data = report.to_json(s)
    assert data["launcher"] == "slurm"
    (job,) = data["slurm_jobs"]
    assert (job["step"], job["job_id"], job["state"], job["submit_host"]) == (
        "allreduce", "17", "CANCELLED", "h1"
    )  # fmt: skip
    md = report.render_markdown(s)
    assert "launcher slurm" in md and "| allreduce | 17 | CANCELLED | never |" in md
    assert "cancelled: still PENDING after 20s" in md


def test_an_ssh_run_says_so_and_has_no_jobs(run_dir: Path) -> None:
    data = report.to_json(report.collect(run_dir))
    assert data["launcher"] == "ssh" and data["slurm_jobs"] == []


def test_a_crashed_ranks_own_error_line_is_quoted(tmp_path: Path) -> None:
    """A rank that crashed leaves no result; the record quotes its traceback's last line
    (the launch log holds every rank's stderr through torchrun --tee), not only the tail."""
    d = tmp_path / "r3"
    (d / "n2").mkdir(parents=True)
    (d / "n2" / "allreduce.log").write_text(
        "supervise: environment from /etc/gpufleet/nccl.env: ['GLOO_SOCKET_IFNAME']\n"
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "allreduce.py", line 9, in <module>\n'
        "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        * 40
    )
    (d / "run.json").write_text(
        json.dumps({"run_id": "r3", "nodes": ["n2"], "expect": {"allreduce": ["n2"]}})
    )
    (rec,) = [r for r in report.collect(d).nodes["n2"].records if r.name == "allreduce:result"]
    assert rec.status == "fail"
    assert (
        "first error (allreduce.log line 4): RuntimeError: CUDA error: an illegal memory access"
        in rec.message
    )


PEER_GONE_NO_TEE = """\
torchrun: the launch log of a rank whose last lines the --tee thread never copied
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_18:53:31
  host      : n2
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 4242)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""

RANK1_STDERR = """\
Traceback (most recent call last):
  File "/var/lib/gpufleet/runs/r1/plain_ddp.py", line 35, in main
    raise RuntimeError(f"rank {rank} on {socket.gethostname()}: failing on purpose")
RuntimeError: rank 3 on n2: failing on purpose
"""


def test_the_failing_ranks_own_stderr_names_the_cause_when_the_tee_missed_it(
    tmp_path: Path,
) -> None:
    """torchrun --tee may stop before a crashed rank's traceback reaches the launch log
    (seen under load in CI); the rank's own stderr copy beside it is complete, and its
    line is the one quoted, with the file it came from."""
    (tmp_path / "run.log").write_text(PEER_GONE_NO_TEE)
    assert "first_error" not in report.root_cause(PEER_GONE_NO_TEE)
    (tmp_path / "run-rank0.stderr.log").write_text("RuntimeError: rank 2: not the cause\n")
    (tmp_path / "run-rank1.stderr.log").write_text(RANK1_STDERR)
    cause = report.launch_root_cause(tmp_path / "run.log")
    assert cause["rank"] == 3 and cause["local_rank"] == 1
    assert cause["first_error"] == {
        "kind": "traceback",
        "line": 4,
        "text": "RuntimeError: rank 3 on n2: failing on purpose",
        "file": "run-rank1.stderr.log",
    }
    note = first_error_note(cause, "run.log")
    assert note == (
        "; first error (run-rank1.stderr.log line 4): RuntimeError: rank 3 on n2: failing on purpose"
    )


def test_without_a_stderr_copy_the_launch_logs_own_line_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "allreduce.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "w.py", line 3, in <module>\n'
        "[rank1]: ValueError: bad size\n" + PEER_GONE_NO_TEE
    )
    cause = report.launch_root_cause(log)
    assert cause["first_error"]["file"] == "allreduce.log"
    assert cause["first_error"]["text"] == "ValueError: bad size"
    assert report.launch_root_cause(tmp_path / "missing.log") == {}


def test_root_cause_cli_reads_the_ranks_stderr_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run.log").write_text(PEER_GONE_NO_TEE)
    (tmp_path / "run-rank1.stderr.log").write_text(RANK1_STDERR)
    assert main(["report", "root-cause", str(tmp_path / "run.log")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["first_error"]["text"].startswith("RuntimeError: rank 3 on n2")


def test_a_missing_result_quotes_a_ranks_stderr_when_the_launch_log_has_no_error(
    tmp_path: Path,
) -> None:
    d = tmp_path / "r4"
    (d / "n2").mkdir(parents=True)
    (d / "n2" / "allreduce.log").write_text(PEER_GONE_NO_TEE)
    (d / "n2" / "allreduce-rank1.stderr.log").write_text(RANK1_STDERR)
    (d / "run.json").write_text(
        json.dumps({"run_id": "r4", "nodes": ["n2"], "expect": {"allreduce": ["n2"]}})
    )
    (rec,) = [r for r in report.collect(d).nodes["n2"].records if r.name == "allreduce:result"]
    assert "first error (allreduce-rank1.stderr.log line 4): RuntimeError: rank 3 on n2" in (
        rec.message
    )


# ------------------------------------------------------------------ hardware profile


def _profile_checks(node: str, recording: str) -> ResultFile:
    """The checks file the suite writes on ``node``: the profile check's record and meta,
    judged on a recording of tests/fixtures/profiles/degraded.py."""
    from fixtures.profiles import degraded
    from gpufleet.node.health import check_registry as registry
    from gpufleet.node.health.context import NodeContext
    from gpufleet.node.nvml import RecordedReader

    rec = degraded.recordings()[recording]
    ctx = NodeContext.open({"node": node}, None, RecordedReader(rec), rec)
    check = next(c for c in registry.CHECKS if c.name == "profile")
    records = [dataclasses.replace(r, node=node) for r in registry.suite_records(check, ctx)]
    return ResultFile(kind="checks", node=node, mode="gpu", started="2026-01-01T00:00:00Z",
                      records=records, meta=ctx.meta)  # fmt: skip


def test_the_report_shows_each_nodes_profile_finding_as_expected_and_found(
    tmp_path: Path,
) -> None:
    d = tmp_path / "r1"
    _profile_checks("gpu-a", "healthy-h100x8-ib").write(d / "gpu-a" / "checks.json")
    _profile_checks("gpu-b", "nvlink-down").write(d / "gpu-b" / "checks.json")
    s = report.write_report(d, plot=False)
    data = json.loads((d / "summary.json").read_text())
    a, b = data["nodes"]["gpu-a"]["profile"], data["nodes"]["gpu-b"]["profile"]
    assert (a["name"], a["findings"]) == ("hgx-h100-8gpu", [])
    assert [(f["name"], f["gpu"], f["expected"], f["found"]) for f in b["findings"]] == [
        ("profile_nvlink", "1 (00000000:2A:00.0)", 18, 17)
    ]
    assert [(n, r.name) for n, _k, r in s.failures()] == [("gpu-b", "profile")]
    md = (d / "summary.md").read_text()
    section_a = md.split("### gpu-a", 1)[1].split("### gpu-b", 1)[0]
    section_b = md.split("### gpu-b", 1)[1]
    assert "Hardware profile: **hgx-h100-8gpu** (detected): matches hgx-h100-8gpu." in section_a
    assert (
        "Hardware profile: **hgx-h100-8gpu** (detected): 1 field(s) differ: FAIL GPU 1 "
        "(00000000:2A:00.0): active NVLinks: expected 18, found 17"
    ) in section_b
    assert "expected 18" not in section_a


def test_a_node_whose_profile_could_not_be_chosen_says_why(tmp_path: Path) -> None:
    d = tmp_path / "r1"
    error = "unknown system profile 'dgx' (known: ...). Fix: set it"
    profile: dict[str, object] = {"requested": "dgx", "name": None, "how": "named",
                                  "ib_compared": True, "error": error, "findings": []}  # fmt: skip
    rf = ResultFile(kind="checks", node="n1", mode="gpu", started="2026-01-01T00:00:00Z",
                    records=[Record("profile", "fail", node="n1", remedy="set it")],
                    meta={"profile": profile})  # fmt: skip
    rf.write(d / "n1" / "checks.json")
    _smoke("n2").write(d / "n2" / "smoke.json")
    report.write_report(d, plot=False)
    md = (d / "summary.md").read_text()
    assert "Hardware profile: none chosen (dgx): unknown system profile 'dgx'" in md
    assert json.loads((d / "summary.json").read_text())["nodes"]["n2"]["profile"] is None
