"""gpufleet.results: statuses, the envelope's valid_until, and a stale file read as
incomplete."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpufleet import results
from gpufleet.results import (
    Record,
    ResultFile,
    load_result_file,
    read_as_of,
    utc_stamp,
    valid_until,
)

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)


def test_incomplete_is_a_status_and_others_are_refused() -> None:
    assert Record("xid_errors", "incomplete").status == "incomplete"
    with pytest.raises(ValueError, match="status must be one of"):
        Record("xid_errors", "unknown")  # type: ignore[arg-type]


def test_valid_until_round_trips_through_the_file(tmp_path: Path) -> None:
    result = ResultFile(
        kind="health", node="n1", mode="node", started=utc_stamp(T0),
        records=[Record("gpu_count", "pass")], valid_until=valid_until(T0, 24),
    )  # fmt: skip
    loaded = load_result_file(result.write(tmp_path / "health.json"))
    assert loaded.valid_until == "2026-12-06T09:00:00Z"
    with pytest.raises(ValueError, match="> 0 hours"):
        valid_until(T0, 0)


def _health(**over: object) -> ResultFile:
    records = [
        Record("gpu_count", "pass", message="8 GPUs"),
        Record("row_remap", "fail", message="pending", remedy="reset"),
        Record("env_python", "skip", message="no env"),
    ]
    base: dict[str, object] = {"valid_until": valid_until(T0, 1), "records": records}
    base.update(over)
    return ResultFile(kind="health", node="n1", mode="node", started=utc_stamp(T0), **base)  # type: ignore[arg-type]


def test_a_result_reads_as_is_until_valid_until() -> None:
    fresh = _health()
    assert read_as_of(fresh, T0 + timedelta(minutes=59)) is fresh


def test_a_stale_result_reads_as_incomplete_with_a_remedy() -> None:
    late = T0 + timedelta(hours=2)
    stale = read_as_of(_health(), late)
    assert [r.status for r in stale.records] == ["incomplete", "incomplete", "skip"]
    first = stale.records[0]
    assert first.message.startswith(
        "stale: this pass verdict was valid until 2026-12-05T10:00:00Z (read at "
        "2026-12-05T11:00:00Z): 8 GPUs"
    )
    assert first.remedy


def test_a_result_without_valid_until_never_expires() -> None:
    old = _health(valid_until=None)
    assert read_as_of(old, T0 + timedelta(days=365)) is old


def test_rerun_meta_keeps_the_options_and_drops_the_paths_and_output_files() -> None:
    args = ["/s/checks", "-p", "no:cacheprovider", "--gpufleet-json=/r/checks.json",
            "--junitxml", "/r/checks.xml", "--node=node2", "-c", "/s/checks/pytest.ini",
            "--system-profile=auto"]  # fmt: skip
    meta = results.rerun_meta(
        python="/env/bin/python", cwd="/home/u", rootdir="/s/checks", args=args,
        paths=["/s/checks"], env={"PYTHONPATH": "/src", "HOME": "/home/u"},
        tests={"ecc_mode@0 (x)": "test_memory.py::test_ecc_mode[gpu0]"},
    )  # fmt: skip
    assert meta["options"] == ["-p", "no:cacheprovider", "--node=node2", "-c",
                               "/s/checks/pytest.ini", "--system-profile=auto"]  # fmt: skip
    assert meta["env"] == {"PYTHONPATH": "/src"}  # only what the suites read
    assert meta["tests"] == {"ecc_mode@0 (x)": "test_memory.py::test_ecc_mode[gpu0]"}


def test_record_key_tells_the_gpus_of_one_check_apart() -> None:
    a = results.Record("ecc_mode", "warn", gpu="0 (00000000:18:00.0)")
    b = results.Record("ecc_mode", "warn", gpu="1 (00000000:2A:00.0)")
    assert results.record_key(a) != results.record_key(b)
    assert results.record_key(results.Record("gpu_count", "fail")) == "gpu_count"
