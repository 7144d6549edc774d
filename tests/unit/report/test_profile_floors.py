"""gpufleet.report.profile_floors: each node's single-node all-reduce busbw against its system
profile's floor (floors.allreduce_busbw_gbs: 460 GB/s at 16 GiB on hgx-h100-8gpu), judged
in the report: summary.json, summary.md, junit.xml and the run's exit code."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gpufleet import report
from gpufleet.node.profiles import load_profiles
from gpufleet.report import profile_floors
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.verify import bandwidth as bench

H100 = "hgx-h100-8gpu"
GIB = 1 << 30
CASE = "profile-floors:allreduce_busbw_gbs"


def _checks(node: str, profile: str | None) -> ResultFile:
    """The checks file the node check ``profile`` leaves: its record and meta["profile"]."""
    meta: dict[str, object] = {"requested": "auto", "name": profile, "how": "detected", "ib_compared": False,
            "error": "" if profile else "no profile lists the GPU model(s)", "findings": []}  # fmt: skip
    rec = Record("profile", "pass" if profile else "fail", node=node, remedy="" if profile else "x")
    return ResultFile("checks", node, "gpu", "2026-01-01T00:00:00Z", records=[rec],
                      meta={"profile": meta})  # fmt: skip


def _smoke(node: str, busbw: dict[int, float], ranks: int = 8, backend: str = "nccl") -> ResultFile:
    rows = [
        BandwidthRow(
            **{**bench.make_row(size, "float32", 1e-3, ranks, backend).to_dict(), "busbw": value}
        )
        for size, value in busbw.items()
    ]
    mode = "gpu" if backend == "nccl" else "cpu"
    return ResultFile("smoke", node, mode, "2026-01-01T00:00:00Z",
                      records=[Record("test_allreduce_bandwidth", "pass", node=node)],
                      bandwidth=rows)  # fmt: skip


def _run(tmp_path: Path, nodes: dict[str, dict[int, float]], profile: str | None = H100) -> Path:
    d = tmp_path / "run"
    for node, busbw in nodes.items():
        _checks(node, profile).write(d / node / "checks.json")
        _smoke(node, busbw).write(d / node / "smoke.json")
    return d


def _sweep(at_16g: float) -> dict[int, float]:
    """A sweep up to 16 GiB: small sizes far below any floor, as on real nodes."""
    return {GIB: at_16g * 0.8, 16 * GIB: at_16g}


def _suite(d: Path, name: str) -> ET.Element | None:
    return next((s for s in ET.parse(d / "junit.xml").getroot() if s.get("name") == name), None)


def test_a_node_below_the_floor_at_16_gib_fails_the_run_named(tmp_path: Path) -> None:
    d = _run(tmp_path, {"n1": _sweep(470.0), "n2": _sweep(401.5), "n3": _sweep(478.0)})
    s = report.write_report(d, plot=False)
    assert s.status == "fail" and s.exit_code == 1
    (fail,) = s.failures()
    node, kind, rec = fail
    assert (node, kind, rec.name, rec.status) == ("n2", "profile-floors", CASE, "fail")
    assert (rec.value, rec.threshold) == (401.5, 460.0)
    for says in ("n2", "expected >= 460.0 GB/s", "found 401.5 GB/s", "at 16G", "8 ranks", H100):
        assert says in rec.message, (says, rec.message)
    assert "nvidia-smi topo -m" in rec.remedy and "Fabric Manager" in rec.remedy

    data = json.loads((d / "summary.json").read_text())
    assert data["status"] == "fail" and data["exit_code"] == 1
    (entry,) = data["nodes"]["n2"]["floors"]
    assert {k: entry[k] for k in ("floor", "expected", "found", "unit", "size_bytes", "status")} == {
        "floor": "allreduce_busbw_gbs", "expected": 460.0, "found": 401.5, "unit": "GB/s",
        "size_bytes": 16 * GIB, "status": "fail",
    }  # fmt: skip
    assert "nvidia-smi topo -m" in entry["remedy"]
    assert [data["nodes"][n]["floors"][0]["status"] for n in ("n1", "n3")] == ["pass", "pass"]
    assert [f["name"] for f in data["failures"]] == [CASE]

    md = (d / "summary.md").read_text()
    n2 = md.split("### n2", 1)[1].split("### n3", 1)[0]
    assert "Profile floors: FAIL allreduce_busbw_gbs: expected >= 460.0 GB/s, found 401.5" in n2
    assert "| n2 | profile-floors | " + CASE in md  # in the failures table
    assert "3 node(s) with a system profile: allreduce_busbw_gbs judged on 3 (1 fail)" in md

    suite = _suite(d, "cluster.profile-floors")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "0")
    failed = [
        tc.get("classname") for tc in suite.iter("testcase") if tc.find("failure") is not None
    ]
    assert failed == ["profile-floors.n2"]


def test_every_node_above_the_floor_passes(tmp_path: Path) -> None:
    d = _run(tmp_path, {"n1": _sweep(470.0), "n2": _sweep(460.0), "n3": _sweep(478.0)})
    s = report.write_report(d, plot=False)
    assert s.status == "pass" and s.exit_code == 0  # 460.0 at a floor of 460.0 clears it
    floors = json.loads((d / "summary.json").read_text())["nodes"]
    assert [floors[n]["floors"][0]["found"] for n in ("n1", "n2", "n3")] == [470.0, 460.0, 478.0]
    suite = _suite(d, "cluster.profile-floors")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    assert "Profile floors: PASS allreduce_busbw_gbs: expected >= 460.0 GB/s, found 470.0" in (
        (d / "summary.md").read_text()
    )


def test_a_sweep_that_stops_at_1_gib_is_not_judged_and_says_how_to_raise_it(
    tmp_path: Path,
) -> None:
    # 100 GB/s at 1 GiB would be far below the floor: it must not be judged against it
    short = {16 << 20: 20.0, GIB: 100.0}
    d = _run(tmp_path, {"n1": short, "n2": short, "n3": short})
    s = report.write_report(d, plot=False)
    assert s.status == "pass" and not s.failures()
    entry = json.loads((d / "summary.json").read_text())["nodes"]["n1"]["floors"][0]
    assert entry["status"] == "not judged" and entry["found"] is None
    assert entry["floor_size_bytes"] == 16 * GIB
    why = entry["why"]
    assert "largest size measured 1G, the floor applies at 16G" in why
    assert "verify_sizes" in why and "16G" in why.split("verify_sizes", 1)[1]
    suite = _suite(d, "cluster.profile-floors")
    assert suite is not None
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("3", "3", "0")
    assert "allreduce_busbw_gbs not judged: largest size measured 1G" in (
        (d / "summary.md").read_text()
    )


def test_a_simulated_cpu_node_has_nothing_judged_and_says_why_once(tmp_path: Path) -> None:
    gloo = {4 << 10: 0.1, 8 << 20: 1.5}
    d = tmp_path / "run"
    for node in ("n1", "n2", "n3"):
        _checks(node, "simulated-cpu").write(d / node / "checks.json")
        _smoke(node, gloo, ranks=2, backend="gloo").write(d / node / "smoke.json")
    s = report.write_report(d, plot=False)
    assert s.status == "pass"
    assert not [r for nr in s.nodes.values() for r in nr.records if r.name == CASE]
    assert _suite(d, "cluster.profile-floors") is None  # no test case: nothing was judged
    (entry,) = json.loads((d / "summary.json").read_text())["nodes"]["n1"]["floors"]
    assert entry["status"] == "not judged"
    assert "profile simulated-cpu has no allreduce_busbw_gbs floor" in entry["why"]
    assert "gloo over veth" in entry["why"]  # the profile's own note says why
    md = (d / "summary.md").read_text()
    assert md.count("profile simulated-cpu has no allreduce_busbw_gbs floor") == 3  # once a node


def test_the_largest_size_at_or_above_the_floors_size_is_judged(tmp_path: Path) -> None:
    # low at 16 GiB, above the floor at 32 GiB: the 32 GiB row decides
    d = _run(tmp_path, {"n1": {GIB: 100.0, 16 * GIB: 300.0, 32 * GIB: 470.0}})
    s = report.collect(d)
    (entry,) = s.floors["n1"]
    assert (entry["status"], entry["size_bytes"], entry["found"]) == ("pass", 32 * GIB, 470.0)


def test_repeated_rows_of_the_size_give_their_median(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _checks("n1", H100).write(d / "n1" / "checks.json")
    rows = [BandwidthRow(**{**bench.make_row(16 * GIB, "float32", 1e-3, 8, "nccl").to_dict(),
                            "busbw": b}) for b in (400.0, 470.0, 480.0)]  # fmt: skip
    ResultFile("smoke", "n1", "gpu", "2026-01-01T00:00:00Z", bandwidth=rows).write(
        d / "n1" / "smoke.json"
    )
    (entry,) = report.collect(d).floors["n1"]
    assert (entry["status"], entry["found"]) == ("pass", 470.0)


@pytest.mark.parametrize(
    ("ranks", "backend", "says"),
    [
        (4, "nccl", "ran on 4 rank(s); the floor is for all 8 GPUs of hgx-h100-8gpu"),
        (8, "gloo", "ran with gloo; the floor is NCCL's"),
    ],
)
def test_a_sweep_over_fewer_gpus_or_without_nccl_is_not_judged(
    tmp_path: Path, ranks: int, backend: str, says: str
) -> None:
    d = tmp_path / "run"
    _checks("n1", H100).write(d / "n1" / "checks.json")
    _smoke("n1", {16 * GIB: 100.0}, ranks=ranks, backend=backend).write(d / "n1" / "smoke.json")
    s = report.collect(d)
    (entry,) = s.floors["n1"]
    assert entry["status"] == "not judged" and says in entry["why"], entry
    assert s.status == "pass"


def test_a_node_whose_profile_is_unknown_here_or_unchosen_is_not_judged(tmp_path: Path) -> None:
    d = tmp_path / "run"
    _checks("n1", "dgx-b300").write(d / "n1" / "checks.json")
    _checks("n2", None).write(d / "n2" / "checks.json")
    _smoke("n3", _sweep(100.0)).write(d / "n3" / "smoke.json")  # no checks result at all
    s = report.collect(d)
    assert "profile dgx-b300 is not one this gpufleet ships" in s.floors["n1"][0]["why"]
    assert "no system profile chosen" in s.floors["n2"][0]["why"]
    assert s.floors["n3"] == []
    assert not [r for nr in s.nodes.values() for r in nr.records if r.name == CASE]
    assert s.floors_reason == (
        "2 node(s) with a system profile: allreduce_busbw_gbs judged on 0 (0 fail), not judged "
        "on 2; 1 node(s) without one"
    )


def test_the_floor_comes_from_the_profile_file(tmp_path: Path) -> None:
    """A site's own figure in the profile moves the verdict: nothing in the module copies it."""
    profiles = load_profiles()
    h100 = profiles[H100]
    site_floor = dataclasses.replace(h100.floor("allreduce_busbw_gbs"), value=400.0)
    figures = {**h100.figures, "floors.allreduce_busbw_gbs": site_floor}
    site = {**profiles, H100: dataclasses.replace(h100, figures=figures)}
    d = _run(tmp_path, {"n1": _sweep(401.5)})
    s = report.collect(d)
    assert s.floors["n1"][0]["status"] == "fail"  # the shipped 460
    s.floors.clear()
    (rec,) = profile_floors.judge(s, site)
    assert (rec.status, rec.threshold) == ("pass", 400.0)
