"""gpufleet.report.sdc: the deterministic computation's digests of every device, compared
within a node and across nodes of one model and software (recordings in tests/fixtures/compute)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from gpufleet import report
from gpufleet.node.compute import NodeCompute
from gpufleet.results import ResultFile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "compute"


def _run(tmp_path: Path, files: dict[str, str]) -> Path:
    d = tmp_path / "run"
    for node, name in files.items():
        (d / node).mkdir(parents=True)
        data = json.loads((FIXTURES / name).read_text())
        data["node"] = node
        (d / node / "compute.json").write_text(json.dumps(data))
    return d


def _sdc(d: Path) -> dict[str, dict[str, object]]:
    s = report.write_report(d, plot=False)
    return {
        n: next(r.to_dict() for r in nr.records if r.name == "sdc:compare")
        for n, nr in s.nodes.items()
    }


def test_one_gpu_of_a_node_of_8_with_other_bits_fails_by_name(tmp_path: Path) -> None:
    got = _sdc(_run(tmp_path, {"h100-c": "h100-sdc-gpu3.json"}))
    rec = got["h100-c"]
    assert rec["status"] == "fail" and rec["gpu"] == "3" and rec["value"] == 1
    assert "h100-c GPU 3: digest" in str(rec["message"]) and "differs from 7 of 8 devices" in str(
        rec["message"]
    )
    assert "dcgmi diag -r 3" in str(rec["remedy"])


def test_a_node_whose_gpu_differs_from_the_other_nodes_is_the_one_named(tmp_path: Path) -> None:
    d = _run(tmp_path, {"h100-a": "h100-healthy.json", "h100-c": "h100-sdc-gpu3.json"})
    got = _sdc(d)
    assert got["h100-a"]["status"] == "pass" and "16 device(s)" not in str(got["h100-a"]["message"])
    assert got["h100-c"]["status"] == "fail" and "differs from 15 of 16 devices" in str(
        got["h100-c"]["message"]
    )
    data = json.loads((d / "summary.json").read_text())
    (group,) = data["sdc"]["groups"]
    assert group["devices"] == 16 and group["mismatches"] == [
        {"node": "h100-c", "device": "3", "digest": group["mismatches"][0]["digest"]}
    ]
    assert data["status"] == "fail"
    suite = next(x for x in ET.parse(d / "junit.xml").getroot() if x.get("name") == "cluster.sdc")
    assert suite.get("failures") == "1"
    assert "| h100-c 3 |" in (d / "summary.md").read_text()


def test_two_devices_that_disagree_have_no_majority_and_both_fail(tmp_path: Path) -> None:
    d = tmp_path / "run"
    for node, digest in (("n1", "a" * 64), ("n2", "b" * 64)):
        meta = {
            "figures": [{"device": "cpu", "dtype": "float32", "tflops": 0.04, "digests": [digest]}],
            "sdc_key": {"model": "CPU X", "software": "torch 2.13.0+cpu", "params": "p"},
        }
        ResultFile("compute", node, "cpu", "2026-01-01T00:00:00Z", meta=meta).write(
            d / node / "compute.json"
        )
    got = _sdc(d)
    assert {n: r["status"] for n, r in got.items()} == {"n1": "fail", "n2": "fail"}
    assert "no majority" in str(got["n1"]["message"]) and "rerun on more devices" in str(
        got["n1"]["remedy"]
    )


def test_other_models_or_software_are_compared_apart(tmp_path: Path) -> None:
    d = _run(tmp_path, {"h100-a": "h100-healthy.json", "h200-a": "h200-at-floor.json"})
    got = _sdc(d)
    # one H100 node and one H200 node: each group holds one node's 8 devices, all equal
    assert {r["status"] for r in got.values()} == {"pass"}
    data = json.loads((d / "summary.json").read_text())
    assert sorted(g["key"]["model"] for g in data["sdc"]["groups"]) == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
    ]


def test_a_lone_device_is_compared_with_nothing_and_says_so(tmp_path: Path) -> None:
    d = tmp_path / "run"
    meta = {
        "figures": [{"device": "cpu", "dtype": "float32", "tflops": 0.04, "digests": ["c" * 64]}],
        "sdc_key": {"model": "CPU X", "software": "torch", "params": "p"},
    }
    ResultFile("compute", "n1", "cpu", "2026-01-01T00:00:00Z", meta=meta).write(
        d / "n1" / "compute.json"
    )
    rec = _sdc(d)["n1"]
    assert rec["status"] == "pass" and "nothing to compare its digest with" in str(rec["message"])


def test_the_recordings_hold_what_their_note_says() -> None:
    data = json.loads((FIXTURES / "h100-sdc-gpu3.json").read_text())
    figs = NodeCompute.from_meta("x", data["meta"]).figures
    assert len({f.digests[0] for f in figs}) == 2 and figs[3].digests[0] != figs[0].digests[0]
