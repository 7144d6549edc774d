"""The cluster JUnit file (gpufleet.report.junit): one suite per node and per cluster step,
valid against the Ant JUnit schema CI systems read (tests/fixtures/junit/junit.xsd)."""

from __future__ import annotations

import importlib
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import pytest

from gpufleet import report, results
from gpufleet.report import junit
from gpufleet.results import Record, ResultFile, Status

XSD = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit.xsd"
ZONELESS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")
SUITE_ATTRS = ("name", "package", "id", "timestamp", "hostname", "tests", "failures", "errors")


def ant_schema_problems(root: ET.Element) -> list[str]:
    """The rules of junit.xsd, checked by hand (no XSD validator in the controller env)."""
    out: list[str] = []
    if root.tag != "testsuites" or root.attrib:
        out.append("root must be <testsuites> without attributes")
    for i, suite in enumerate(root):
        where = f"testsuite {i} ({suite.get('name')})"
        if suite.tag != "testsuite":
            out.append(f"{where}: <{suite.tag}> is not a testsuite")
        missing = [a for a in (*SUITE_ATTRS, "time") if not suite.get(a)]
        if missing:
            out.append(f"{where}: missing {missing}")
        if not ZONELESS.match(suite.get("timestamp", "")):
            out.append(f"{where}: timestamp {suite.get('timestamp')!r} is not zone-less ISO")
        for a in ("id", "tests", "failures", "errors", "skipped"):
            if suite.get(a) is not None and not str(suite.get(a)).isdigit():
                out.append(f"{where}: {a} is not an int")
        tags = [c.tag for c in suite]
        body = [t for t in tags if t == "testcase"]
        if tags != ["properties", *body, "system-out", "system-err"]:
            out.append(f"{where}: children out of order: {tags}")
        for tc in suite.iter("testcase"):
            if not tc.get("name") or not tc.get("classname") or tc.get("time") is None:
                out.append(f"{where}: testcase without name, classname or time")
            kids = list(tc)
            if len(kids) > 1 or any(k.tag not in ("skipped", "error", "failure") for k in kids):
                out.append(f"{where}: testcase {tc.get('name')} has {[k.tag for k in kids]}")
            if any(k.tag in ("error", "failure") and not k.get("type") for k in kids):
                out.append(f"{where}: {tc.get('name')}: failure/error without type")
    return out


def _file(
    kind: str,
    node: str,
    recs: list[tuple[str, str, str]],
    started: str = "2026-03-01T10:00:00Z",
    duration_s: float = 2.5,
    meta: dict[str, object] | None = None,
) -> ResultFile:
    return ResultFile(
        kind=kind,
        node=node,
        mode="gpu",
        started=started,
        duration_s=duration_s,
        meta=dict(meta or {}),
        records=[
            Record(name, cast(Status, status), node=node, message=msg, remedy=f"fix {name}")
            for name, status, msg in recs
        ],
    )


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # "incomplete" (a check that could not finish) and a status the report does not know
    monkeypatch.setattr(results, "STATUSES", (*results.STATUSES, "incomplete", "lost"))
    d = tmp_path / "r9"
    checks: list[tuple[str, str, str]] = [
        ("gpu_count", "pass", ""),
        ("ecc", "fail", "2 uncorrectable \x1b[31mECC\x1b[0m errors"),
        ("nvlink", "skip", "no NVLink"),
        ("clocks", "warn", "SM clock 1200 MHz under 1400"),
        ("xid", "incomplete", "nvidia-smi timed out"),
    ]
    _file("checks", "n1", checks, started="2026-03-01T10:30:00+01:00").write(d / "n1/checks.json")
    _file("smoke", "n1", [("test_ddp", "pass", "")]).write(d / "n1/smoke.json")
    _file("checks", "n2", [("gpu_count", "lost", "the reader crashed")]).write(d / "n2/checks.json")
    _file("allreduce", "n1", [("allreduce_busbw", "fail", "busbw 3 < 9")]).write(
        d / "n1/allreduce.json"
    )
    meta = {"nnodes": 2, "epoch_loss": [0.5], "ranks": [], "total_samples_per_s": 9.0}
    _file("train", "n1", [("train_loss", "pass", "")], duration_s=40, meta=meta).write(
        d / "n1/train.json"
    )
    _file("train-1node", "n1", [("train_loss", "pass", "")]).write(d / "n1/train-1node.json")
    _file("bisect-1-0", "n2", [("allreduce_busbw", "fail", "busbw 1 < 9")]).write(
        d / "n2/bisect-1-0.json"
    )
    (d / "run.json").write_text(json.dumps({"run_id": "r9", "nodes": ["n1", "n2", "n3"]}))
    report.write_report(d, plot=False)
    return d


def _suites(d: Path) -> dict[str, ET.Element]:
    return {s.get("name", ""): s for s in ET.parse(d / "junit.xml").getroot()}


def test_one_suite_per_node_and_per_cluster_step(run: Path) -> None:
    names = list(_suites(run))
    assert names == [
        "node.n1",
        "node.n2",
        "node.n3",
        "cluster.all-reduce",
        "cluster.training",
        "cluster.bisection",
    ]
    s = _suites(run)
    assert sorted(tc.get("classname", "") for tc in s["cluster.training"].iter("testcase")) == [
        "train-1node.n1",
        "train.n1",
    ]
    assert s["node.n3"].get("tests") == "0"  # a node without results still shows


def test_counts_match_the_cases_and_statuses_map(run: Path) -> None:
    s = _suites(run)
    n1 = s["node.n1"]
    assert {a: n1.get(a) for a in ("tests", "failures", "errors", "skipped")} == {
        "tests": "6",
        "failures": "1",
        "errors": "0",
        "skipped": "2",
    }
    cases = {tc.get("name"): tc for tc in n1.iter("testcase")}
    ecc = cases["ecc"].find("failure")
    assert ecc is not None and ecc.get("type") == "fail"
    assert "remedy: fix ecc" in (ecc.text or "")
    assert "\x1b" not in (ecc.get("message") or "")  # XML 1.0 cannot carry it
    xid = cases["xid"].find("skipped")
    assert xid is not None and xid.get("message") == "incomplete: nvidia-smi timed out"
    nvlink = cases["nvlink"].find("skipped")
    assert nvlink is not None and nvlink.get("message") == "no NVLink"
    assert list(cases["clocks"]) == []  # a warning passes ...
    assert "WARN n1 checks/clocks: SM clock 1200 MHz under 1400 -> fix clocks" in (
        n1.findtext("system-out") or ""
    )  # ... and is listed with its remedy
    lost = s["node.n2"].find("testcase/error")
    assert lost is not None and lost.get("type") == "lost"
    assert s["node.n2"].get("errors") == "1"
    for suite in s.values():
        kids = [c.tag for tc in suite.iter("testcase") for c in tc]
        assert int(suite.get("failures", "")) == kids.count("failure")
        assert int(suite.get("skipped", "")) == kids.count("skipped")
        assert int(suite.get("tests", "")) == len(list(suite.iter("testcase")))


def test_timestamps_are_utc_and_times_the_files_durations(run: Path) -> None:
    s = _suites(run)
    # the earliest file of the suite: checks at 10:30+01:00 (smoke started 10:00Z)
    assert s["node.n1"].get("timestamp") == "2026-03-01T09:30:00"
    assert s["node.n1"].get("time") == "5.000"  # checks 2.5 s + smoke 2.5 s
    assert s["cluster.training"].get("time") == "42.500"


def test_the_file_follows_the_ant_junit_schema(run: Path) -> None:
    root = ET.parse(run / "junit.xml").getroot()
    assert ant_schema_problems(root) == []


def test_the_hand_check_catches_what_the_schema_forbids(run: Path) -> None:
    root = ET.parse(run / "junit.xml").getroot()
    suite = root[0]
    suite.set("timestamp", "2026-03-01T10:00:00Z")
    out = suite.find("system-out")
    assert out is not None
    suite.remove(out)
    failure = root.find(".//failure")
    assert failure is not None
    del failure.attrib["type"]
    problems = ant_schema_problems(root)
    assert len(problems) == 3, problems


def test_the_file_validates_against_the_xsd(run: Path) -> None:
    # lxml is pinned in requirements/controller.txt: a missing install fails here, never skips.
    etree: Any = importlib.import_module("lxml.etree")
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    doc = etree.parse(str(run / "junit.xml"))
    assert schema.validate(doc), schema.error_log
    bad = etree.fromstring(b"<testsuites><testsuite name='x'/></testsuites>")
    assert not schema.validate(bad)


def test_summary_names_the_junit_file(run: Path) -> None:
    data = json.loads((run / "summary.json").read_text())
    assert (run / data["junit"]).is_file()
    assert "junit.xml" in (run / "summary.md").read_text()
    assert data["counts"]["incomplete"] == 1
    assert data["counts"]["fail"] == 3  # ecc, all-reduce, bisection group: incomplete apart
    assert data["counts"]["lost"] == 1


def test_an_incomplete_run_is_not_a_pass_and_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "STATUSES", (*results.STATUSES, "incomplete"))
    d = tmp_path / "r10"
    _file("checks", "n1", [("xid", "incomplete", "timed out"), ("ecc", "pass", "")]).write(
        d / "n1/checks.json"
    )
    s = report.write_report(d, plot=False)
    assert (s.status, s.exit_code, s.failures()) == ("incomplete", 1, [])
    assert "incomplete" in report.table(s).splitlines()[2]
    assert json.loads((d / "summary.json").read_text())["status"] == "incomplete"


def test_an_incomplete_junit_skip_of_the_checks_suite_reads_back_as_incomplete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(results, "STATUSES", (*results.STATUSES, "incomplete"))
    x = tmp_path / "checks.xml"
    x.write_text(
        '<testsuite><testcase name="a"><skipped message="incomplete: timed out"/></testcase>'
        '<testcase name="b"><skipped message="no GPU"/></testcase></testsuite>'
    )
    assert [r.status for r in report.junit_records(x, "n1")] == ["incomplete", "skip"]


def test_cluster_steps_of_result_kinds() -> None:
    got = {
        k: junit.cluster_step(k)
        for k in ("allreduce", "train", "train-1node", "bisect-2-1", "slurm-train", "checks")
    }
    assert got == {
        "allreduce": "all-reduce",
        "train": "training",
        "train-1node": "training",
        "bisect-2-1": "bisection",
        "slurm-train": "slurm",
        "checks": None,
    }
    assert junit.iso_utc("2026-03-01T11:00:00+01:00") == "2026-03-01T10:00:00"
    assert junit.iso_utc("yesterday") is None
