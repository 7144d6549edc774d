"""gpufleet.report.changes: what changed since the previous run of the same inventory, from two
synthetic runs side by side under reports/ (summary.json ``changes``, index.html, summary.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpufleet import report
from gpufleet.report import changes
from gpufleet.results import BandwidthRow, Record, ResultFile, Status

INVENTORY = ["/srv/cluster/hosts.yml"]


def _run(
    reports: Path,
    run_id: str,
    finished: str | None,
    nodes: dict[str, tuple[Status, float]],
    inventory: list[str] | None = INVENTORY,
) -> Path:
    """A run of ``nodes`` {name: (status of its ECC check, its own all-reduce busbw)}, with
    its report, as verify leaves it."""
    d = reports / run_id
    for node, (status, busbw) in nodes.items():
        row = BandwidthRow(2**20, 2**18, "float32", 100.0, busbw / 1.5, busbw, 4, "gloo")
        ResultFile(
            "smoke", node, "cpu", "2026-12-01T00:00:00Z",
            records=[Record("test_ecc", status, node=node, message=f"ecc {status}",
                            remedy="" if status == "pass" else "reset the GPU")],
            bandwidth=[row], run_id=run_id,
        ).write(d / node / "smoke.json")  # fmt: skip
    info: dict[str, Any] = {"run_id": run_id, "nodes": sorted(nodes), "result_run_ids": True}
    if inventory is not None:
        info["inventory"] = inventory
    if finished is not None:
        info["finished"] = finished
    (d / "run.json").write_text(json.dumps(info))
    report.write_report(d, plot=False)
    return d


def _changes(d: Path) -> dict[str, Any]:
    report.write_report(d, plot=False)
    data: dict[str, Any] = json.loads((d / "summary.json").read_text())
    return dict(data["changes"])


def test_a_passing_run_after_a_failed_one_shows_the_recovery(tmp_path: Path) -> None:
    first = _run(
        tmp_path, "a", "2026-12-01T10:00:00Z", {"n1": ("pass", 10.0), "n2": ("fail", 10.0)}
    )
    assert _changes(first)["previous"] is None  # the first run of this inventory
    second = _run(
        tmp_path, "b", "2026-12-02T12:30:00Z", {"n1": ("pass", 10.0), "n2": ("pass", 10.0)}
    )
    c = _changes(second)
    assert c["previous"]["run_id"] == "a" and c["previous"]["status"] == "fail"
    assert c["previous"]["age_s"] == 26.5 * 3600
    assert [(r["node"], r["name"], r["was"], r["status"]) for r in c["recoveries"]] == [
        ("n2", "test_ecc", "fail", "pass")
    ]
    assert c["new_failures"] == [] and c["still_failing"] == 0
    page = (second / "index.html").read_text()
    section = page.split('id="changes"')[1].split("</section>")[0]
    assert "Recoveries" in section and "<td>n2</td>" in section and "1 d 2 h" in section
    md = (second / "summary.md").read_text()
    assert "| n2 | smoke / test_ecc | fail | pass |" in md


def test_a_node_added_and_a_new_failure(tmp_path: Path) -> None:
    _run(tmp_path, "a", "2026-12-01T10:00:00Z", {"n1": ("pass", 10.0), "n2": ("pass", 10.0)})
    d = _run(tmp_path, "b", "2026-12-01T11:00:00Z",
             {"n1": ("pass", 10.0), "n2": ("fail", 10.0), "n3": ("pass", 10.0)})  # fmt: skip
    c = _changes(d)
    assert c["nodes_added"] == ["n3"] and c["nodes_gone"] == []
    assert [(f["node"], f["was"], f["status"]) for f in c["new_failures"]] == [
        ("n2", "pass", "fail")
    ]
    assert c["recoveries"] == []
    # and the other way: n3 gone again, n2 still failing
    later = _run(
        tmp_path, "c", "2026-12-01T12:00:00Z", {"n1": ("pass", 10.0), "n2": ("fail", 10.0)}
    )
    c = _changes(later)
    assert c["previous"]["run_id"] == "b"
    assert c["nodes_gone"] == ["n3"] and c["still_failing"] == 1 and c["new_failures"] == []


def test_a_figure_that_moved_12_percent_is_listed_one_that_moved_8_is_not(tmp_path: Path) -> None:
    _run(tmp_path, "a", "2026-12-01T10:00:00Z", {"n1": ("pass", 10.0), "n2": ("pass", 10.0)})
    d = _run(tmp_path, "b", "2026-12-01T11:00:00Z", {"n1": ("pass", 8.8), "n2": ("pass", 10.8)})
    c = _changes(d)
    assert c["figures_compared"] == 2
    (moved,) = c["moved"]
    assert moved["node"] == "n1" and moved["change"] == -0.12
    assert (moved["before"], moved["after"], moved["unit"]) == (10.0, 8.8, "GB/s")
    assert "of n1" in moved["figure"] and "1M" in moved["figure"]


def test_only_an_earlier_run_of_the_same_inventory_counts(tmp_path: Path) -> None:
    two: dict[str, tuple[Status, float]] = {"n1": ("pass", 10.0), "n2": ("pass", 10.0)}
    _run(tmp_path, "other", "2026-12-01T10:30:00Z", two, inventory=["/srv/lab/hosts.yml"])
    _run(tmp_path, "old", "2026-12-01T09:00:00Z", two)
    _run(tmp_path, "unnamed", None, two, inventory=None)  # written before run.json named it
    _run(tmp_path, "later", "2026-12-01T12:00:00Z", two)  # after the run compared below
    d = _run(tmp_path, "now", "2026-12-01T11:00:00Z", two)
    c = _changes(d)
    assert c["previous"]["run_id"] == "old" and c["previous"]["age_s"] == 7200
    (tmp_path / "old" / "summary.json").unlink()  # a run without a report is not compared
    c = _changes(d)
    assert c["previous"] is None
    assert "no earlier run of this inventory (/srv/cluster/hosts.yml)" in c["reason"]
    assert "1 run(s) there name no inventory" in c["reason"]


def test_a_run_json_without_inventory_is_rendered_and_says_why_nothing_is_compared(
    tmp_path: Path,
) -> None:
    _run(tmp_path, "a", "2026-12-01T10:00:00Z", {"n1": ("fail", 10.0)})
    d = _run(tmp_path, "b", None, {"n1": ("pass", 10.0)}, inventory=None)
    c = _changes(d)
    assert c["previous"] is None and c["recoveries"] == []
    assert "names no inventory (written before gpufleet recorded it)" in c["reason"]
    page = (d / "index.html").read_text()
    assert "No comparison: this run&#39;s run.json names no inventory" in page


def test_diff_compares_records_by_node_kind_name_and_gpu() -> None:
    def data(*records: dict[str, Any]) -> dict[str, Any]:
        return {"nodes": {"n1": {"records": list(records)}}}

    gpu0 = {"kind": "checks", "name": "ecc_mode", "gpu": "0 (a)", "status": "fail"}
    gpu1 = {"kind": "checks", "name": "ecc_mode", "gpu": "1 (b)", "status": "pass"}
    d = changes.diff(data(gpu0, {**gpu1, "status": "fail"}), data(gpu0, gpu1))
    assert [f["gpu"] for f in d["new_failures"]] == ["1 (b)"] and d["still_failing"] == 1
    gone = changes.diff(data(), data(gpu0))  # the failed record is gone: recovered
    assert [(r["gpu"], r["status"]) for r in gone["recoveries"]] == [("0 (a)", "gone")]
    unknown = {**gpu0, "status": "incomplete"}
    assert changes.diff(data(unknown), data(gpu1))["new_failures"][0]["status"] == "incomplete"
