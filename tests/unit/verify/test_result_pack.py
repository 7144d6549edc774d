"""gpufleet.verify.result_pack: a node's result files in one answer, trusted by nothing on the
controller side (names, types, sizes checked again)."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpufleet.verify import result_pack as resultpack

PATTERNS = ["*.json", "*.xml", "*.log"]


def _run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "node1"
    d.mkdir()
    (d / "allreduce.json").write_text('{"ok": true}')
    (d / "checks.xml").write_text("<testsuite/>")
    (d / "allreduce.log").write_text("line\n" * 100)
    (d / "probe-raw.json").write_text("{}")
    (d / "allreduce.pid").write_text("123")
    (d / "ranks").mkdir()
    (d / "ranks" / "r0.json").write_text("{}")
    return d


def _tar_b64(members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return base64.b64encode(buf.getvalue()).decode()


def test_pack_then_unpack_copies_exactly_the_selected_top_level_files(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    obj = resultpack.parse(json.dumps(resultpack.pack(d, PATTERNS, ["probe-raw.json"])))
    assert obj["files"] == ["allreduce.json", "allreduce.log", "checks.xml"]
    got = resultpack.unpack(obj, tmp_path / "dest", PATTERNS, ["probe-raw.json"])
    assert sorted(p.name for p in (tmp_path / "dest").iterdir()) == obj["files"]
    assert got.written == obj["files"] and not got.refused
    for name in obj["files"]:
        assert (tmp_path / "dest" / name).read_bytes() == (d / name).read_bytes()


def test_links_and_oversized_files_stay_on_the_node_and_are_named(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text('{"token": "x"}')
    (d / "evil.json").symlink_to(secret)
    (d / "big.log").write_bytes(b"x" * 2000)
    obj = resultpack.pack(d, PATTERNS, max_bytes=1000)
    assert "evil.json" not in obj["files"] and "big.log" not in obj["files"]
    why = {s["name"]: s["why"] for s in obj["skipped"]}
    assert why["evil.json"] == "not a regular file"
    assert "over the 1000 limit" in why["big.log"]


def test_missing_run_dir_packs_nothing(tmp_path: Path) -> None:
    obj = resultpack.pack(tmp_path / "nope", PATTERNS)
    assert obj["files"] == [] and obj["tar"] == ""
    got = resultpack.unpack(obj, tmp_path / "dest", PATTERNS)
    assert got.written == [] and not (tmp_path / "dest").exists()


@pytest.mark.parametrize(
    "name",
    ["../escape.json", "/etc/cron.d/x.json", "sub/dir.json", "notes.txt", ".."],
)
def test_unpack_refuses_names_a_node_should_never_send(tmp_path: Path, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.size = 2
    obj = {"format": resultpack.FORMAT, "tar": _tar_b64([(info, b"{}")])}
    got = resultpack.unpack(obj, tmp_path / "dest", PATTERNS)
    assert got.written == [] and got.refused[0]["name"] == name
    assert not (tmp_path / "escape.json").exists()
    assert list((tmp_path / "dest").iterdir()) == []


def test_unpack_refuses_links_and_devices_in_the_answer(tmp_path: Path) -> None:
    link = tarfile.TarInfo("x.json")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    obj = {"format": resultpack.FORMAT, "tar": _tar_b64([(link, b"")])}
    got = resultpack.unpack(obj, tmp_path / "dest", PATTERNS)
    assert got.refused == [{"name": "x.json", "why": "not a regular file"}]
    assert not (tmp_path / "dest" / "x.json").exists()


def test_unpack_refuses_a_member_over_the_limit(tmp_path: Path) -> None:
    info = tarfile.TarInfo("a.log")
    info.size = 10
    obj = {"format": resultpack.FORMAT, "tar": _tar_b64([(info, b"0123456789")])}
    got = resultpack.unpack(obj, tmp_path / "dest", PATTERNS, max_bytes=5)
    assert got.written == [] and got.refused[0]["name"] == "a.log"


@pytest.mark.parametrize(
    "text",
    ["", "Traceback (most recent call last):\n", '{"format": "other"}', "[1, 2]"],
)
def test_parse_refuses_what_is_not_a_pack(text: str) -> None:
    with pytest.raises(resultpack.PackError):
        resultpack.parse(text)


def test_broken_tar_or_base64_is_a_pack_error(tmp_path: Path) -> None:
    for blob in ("not base64!", base64.b64encode(b"not a tar").decode()):
        with pytest.raises(resultpack.PackError):
            resultpack.unpack({"format": resultpack.FORMAT, "tar": blob}, tmp_path, PATTERNS)


def test_lock_is_released_only_for_its_own_run(tmp_path: Path) -> None:
    lock = tmp_path / ".lock.node1"
    lock.mkdir()
    (lock / "owner").write_text("run-B 1700000000 ctl:/repo\n")
    assert resultpack.release_lock(lock, "run-A") is False and lock.is_dir()
    assert resultpack.release_lock(lock, "run-B") is True and not lock.exists()
    assert resultpack.release_lock(lock, "run-B") is False


def test_the_command_line_packs_and_releases_in_one_call(tmp_path: Path) -> None:
    d = _run_dir(tmp_path)
    lock = tmp_path / ".lock"
    lock.mkdir()
    (lock / "owner").write_text("R1 1 c\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpufleet.verify.result_pack",
            "pack",
            str(d),
            "--pattern=*.json",
            f"--lock={lock}",
            "--run-id=R1",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(resultpack.__file__).parents[2])},
    )
    obj = resultpack.parse(out.stdout)
    assert obj["files"] == ["allreduce.json", "probe-raw.json"]
    assert obj["released"] is True and not lock.exists()
