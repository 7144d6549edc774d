"""The report's acceptance sections (gpufleet.report.acceptance) and the judges that read the
compute and collectives results: the compute figure in the slow-node comparison
(gpufleet.report.slownodes), the collectives' floors of a site profile
(gpufleet.report.profile_floors), the tier's budget; in summary.json, summary.md and index.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet import report
from gpufleet.node.compute import DeviceFigure
from gpufleet.results import BandwidthRow, Record, ResultFile
from gpufleet.verify import bandwidth as bench

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _cpu_compute(node: str, tflops: float) -> ResultFile:
    fig = DeviceFigure("cpu", "float32", tflops, digests=("d" * 64,))
    meta = {
        "figures": [fig.to_dict()],
        "profile": "simulated-cpu",
        "spread_fraction": 0.5,
        "sdc_key": {"model": "CPU X", "software": "torch 2.13.0+cpu", "params": "p"},
    }
    rec = Record("compute_matmul", "pass", node=node, value=tflops)
    return ResultFile("compute", node, "cpu", "2026-01-01T00:00:00Z", records=[rec], meta=meta)


def _write(d: Path, files: dict[str, list[ResultFile]], run: dict[str, Any] | None = None) -> Path:
    for node, fs in files.items():
        for f in fs:
            f.write(d / node / f"{f.kind}.json")
    if run is not None:
        (d / "run.json").write_text(json.dumps(run))
    return d


def test_a_node_with_slowed_compute_is_named_by_the_compute_figure_alone(tmp_path: Path) -> None:
    # three testbed nodes measuring at once on shared cores; node3's CPU share cut to a tenth
    d = _write(
        tmp_path / "r",
        {
            n: [_cpu_compute(n, t)]
            for n, t in (("node1", 0.0352), ("node2", 0.0381), ("node3", 0.0036))
        },
    )
    s = report.write_report(d, plot=False)
    assert [(f["node"], f["figure"], f["verdict"]) for f in s.slow_nodes] == [
        ("node3", "compute_tflops", "warn")
    ]
    assert s.slow_nodes[0]["ratio"] == pytest.approx(0.0036 / 0.0352, abs=1e-3)
    assert "compute_tflops below 0.2 x median" in s.slow_reason
    md = (d / "summary.md").read_text()
    assert "| node3 | compute_tflops |" in md and "Compute: fleet median 0.0352 TFLOP/s" in md


def test_healthy_cpu_nodes_that_differ_twofold_name_nobody(tmp_path: Path) -> None:
    d = _write(
        tmp_path / "r",
        {
            n: [_cpu_compute(n, t)]
            for n, t in (("node1", 0.021), ("node2", 0.044), ("node3", 0.037))
        },
    )
    assert report.write_report(d, plot=False).slow_nodes == []


def test_an_h100_node_a_fifth_below_the_fleet_median_is_slow(tmp_path: Path) -> None:
    src = json.loads((FIXTURES / "compute" / "h100-healthy.json").read_text())
    files = {}
    for node, scale in (("a", 1.0), ("b", 1.01), ("c", 0.99), ("d", 0.8)):
        meta = json.loads(json.dumps(src["meta"]))
        for f in meta["figures"]:
            f["tflops"] = round(f["tflops"] * scale, 1)
        files[node] = [ResultFile("compute", node, "gpu", "2026-01-01T00:00:00Z", meta=meta)]
    s = report.write_report(_write(tmp_path / "r", files), plot=False)
    assert [(f["node"], f["figure"]) for f in s.slow_nodes] == [("d", "compute_tflops")]


def test_nodes_of_another_gpu_model_are_not_compared_with_the_fleet(tmp_path: Path) -> None:
    src = json.loads((FIXTURES / "compute" / "h100-healthy.json").read_text())
    files = {}
    for node, model, scale in (("a", "H100", 1.0), ("b", "H100", 1.0), ("c", "H100", 0.99),
                               ("x", "A100", 0.34)):  # fmt: skip
        meta = json.loads(json.dumps(src["meta"]))
        meta["sdc_key"]["model"] = model
        for f in meta["figures"]:
            f["tflops"] = round(f["tflops"] * scale, 1)
        files[node] = [ResultFile("compute", node, "gpu", "2026-01-01T00:00:00Z", meta=meta)]
    s = report.write_report(_write(tmp_path / "r", files), plot=False)
    assert s.slow_nodes == []  # the A100 node is one of its model: compared with nothing


def test_the_compute_section_lays_out_every_device(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "compute" / "h100-one-gpu-15pct-slow.json").read_text())
    rf = ResultFile(
        "compute",
        "h100-b",
        "gpu",
        "2026-01-01T00:00:00Z",
        meta=data["meta"],
        records=[
            Record("compute_matmul", "fail", node="h100-b", gpu="5", remedy="x"),
            Record(
                "compute_floor",
                "fail",
                node="h100-b",
                threshold=715.0,
                message="h100-b: 1 of 8 GPU(s) below the floor",
                remedy="x",
            ),
        ],
    )
    d = _write(tmp_path / "r", {"h100-b": [rf]})
    report.write_report(d, plot=False)
    data = json.loads((d / "summary.json").read_text())
    (node,) = data["compute"]["nodes"]
    slow = next(x for x in node["devices"] if x["device"] == "5")
    assert slow["status"] == "fail" and slow["ratio"] == pytest.approx(675.8 / 795.0, abs=1e-3)
    assert node["floor"]["status"] == "fail" and node["floor"]["threshold"] == 715.0
    md = (d / "summary.md").read_text()
    assert "| h100-b | 5 | NVIDIA H100 80GB HBM3 | bfloat16 | 675.8 | 0.85 | fail |" in md
    page = (d / "index.html").read_text()
    assert 'id="compute"' in page and 'id="sdc"' in page


def _collectives(node: str, busbw: float, ranks: int, backend: str, nnodes: int) -> ResultFile:
    rows = [
        BandwidthRow(
            **{
                **bench.make_row(1 << 30, "float32", 1e-2, ranks, backend, op=op).to_dict(),
                "busbw": busbw,
            }
        )
        for op in ("alltoall", "broadcast")
    ]
    recs = [
        Record(f"collective_{op}", "pass", node=node, value=busbw)
        for op in ("alltoall", "broadcast")
    ]
    recs.append(Record("collective_reduce_scatter", "skip", node=node, message="gloo lacks it"))
    meta = {
        "backend": backend,
        "world_size": ranks,
        "nnodes": nnodes,
        "skipped": {"reduce_scatter": "ProcessGroupGloo does not support reduce_scatter"},
    }
    return ResultFile(
        "collectives", node, "gpu", "2026-01-01T00:00:00Z", records=recs, bandwidth=rows, meta=meta
    )


def _checks(node: str, profile: str) -> ResultFile:
    meta = {"profile": {"requested": "auto", "name": profile, "how": "detected", "findings": []}}
    return ResultFile(
        "checks",
        node,
        "gpu",
        "2026-01-01T00:00:00Z",
        records=[Record("profile", "pass", node=node)],
        meta=meta,
    )


@pytest.mark.parametrize(("busbw", "status"), [(210.0, "pass"), (200.0, "pass"), (150.0, "fail")])
def test_a_site_profile_sets_a_collective_floor_judged_on_one_node(
    tmp_path: Path, busbw: float, status: str
) -> None:
    site = FIXTURES / "profiles" / "site-12nvlink"  # alltoall_busbw_gbs 200 on h100-12nvlink
    d = _write(
        tmp_path / "r",
        {"n1": [_checks("n1", "h100-12nvlink"), _collectives("n1", busbw, 8, "nccl", 1)]},
        run={"run_id": "r", "nodes": ["n1"], "profiles_dir": str(site)},
    )
    s = report.write_report(d, plot=False)
    floors = {f["floor"]: f for f in s.floors["n1"]}
    assert floors["alltoall_busbw_gbs"]["status"] == status
    assert floors["alltoall_busbw_gbs"]["expected"] == 200.0
    assert "broadcast_busbw_gbs" not in floors  # no floor set: nothing judged, no line
    rec = next(r for r in s.nodes["n1"].records if r.name == "profile-floors:alltoall_busbw_gbs")
    assert rec.status == status and (status == "pass" or "NCCL_ALGO" in rec.remedy)


def test_a_one_node_floor_is_not_judged_on_a_run_across_nodes(tmp_path: Path) -> None:
    site = FIXTURES / "profiles" / "site-12nvlink"
    d = _write(
        tmp_path / "r",
        {"n1": [_checks("n1", "h100-12nvlink"), _collectives("n1", 90.0, 16, "nccl", 2)]},
        run={"run_id": "r", "nodes": ["n1"], "profiles_dir": str(site)},
    )
    s = report.write_report(d, plot=False)
    floor = next(f for f in s.floors["n1"] if f["floor"] == "alltoall_busbw_gbs")
    assert floor["status"] == "not judged" and "ran on 2 node(s)" in floor["why"]


def test_the_collectives_section_shows_each_apart_with_its_factor(tmp_path: Path) -> None:
    d = _write(tmp_path / "r", {"n1": [_collectives("n1", 0.5, 4, "gloo", 2)]})
    report.write_report(d)  # with the pictures: a chart per collective
    data = json.loads((d / "summary.json").read_text())
    ops = {o["op"]: o for o in data["collectives"]["ops"]}
    assert ops["alltoall"]["factor"] == 0.75 and ops["broadcast"]["factor"] == 1.0
    assert (
        ops["reduce_scatter"]["status"] == "skip"
        and "does not support" in ops["reduce_scatter"]["skipped"]
    )
    assert data["busbw_factors_by_op"] == {"alltoall": {"4": 0.75}, "broadcast": {"4": 1.0}}
    page = (d / "index.html").read_text()
    assert 'id="collectives"' in page and "alltoall (collectives): busbw" in page


def test_a_run_over_its_tier_budget_warns_on_the_first_node(tmp_path: Path) -> None:
    tier = {"name": "quick", "budget_s": 60, "duration_s": 0, "what": "a Slurm prolog"}
    run = {
        "run_id": "r",
        "nodes": ["n1", "n2"],
        "master": "n1 (10.0.0.1:29500)",
        "tier": tier,
        "started": "2026-01-01T00:00:00Z",
        "finished": "2026-01-01T00:01:31Z",
    }
    d = _write(tmp_path / "r", {n: [_cpu_compute(n, 0.03)] for n in ("n1", "n2")}, run=run)
    s = report.write_report(d, plot=False)
    data = json.loads((d / "summary.json").read_text())
    assert data["tier"]["elapsed_s"] == 91.0 and data["tier"]["within"] is False
    (warn,) = [r for r in s.nodes["n1"].records if r.name == "tier:budget"]
    assert warn.status == "warn" and "took 91.0 s, over its budget of 60 s" in warn.message
    assert not [r for r in s.nodes["n2"].records if r.name == "tier:budget"]
    assert "**over its budget**" in (d / "summary.md").read_text()
    run["finished"] = "2026-01-01T00:00:48Z"
    (d / "run.json").write_text(json.dumps(run))
    s = report.write_report(d, plot=False)
    assert not [r for n in s.nodes.values() for r in n.records if r.name == "tier:budget"]
