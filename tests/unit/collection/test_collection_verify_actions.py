"""gpufleet.core.verify_prepare and gpufleet.core.fetch_results: verify's one-round-trip
steps. The node commands run here for real (sh, this interpreter as the node's env python);
only Ansible's connection is replaced by a local subprocess."""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.action import (  # noqa: E402
    fetch_results,
    sync_suites,
    verify_prepare,
)

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _local(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
    r = subprocess.run(
        cmd,
        input=in_data.decode() if in_data is not None else None,
        check=False,
        shell=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )
    return {"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr}


Runner = Callable[..., dict[str, Any]]


def _action(
    cls: type, args: dict[str, Any], monkeypatch: pytest.MonkeyPatch, run: Runner = _local
) -> Any:
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action: Any = object.__new__(cls)
    action._task = SimpleNamespace(args=args)
    action._low_level_execute_command = run
    return action.run(task_vars={"inventory_hostname": "node1"})


# ------------------------------------------------------------------ verify_prepare


def _prepare_args(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {
        "manifest": str(tmp_path / "manifest.json"),
        "run_dir": str(tmp_path / "work" / "run1" / "node1"),
        "python": "",
        "default_python": sys.executable,
        "timeout": 60,
        **kw,
    }


def test_prepare_reads_the_manifest_makes_the_run_dir_and_counts_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"env_python": sys.executable, "x": 1}))
    got = _action(verify_prepare.ActionModule, _prepare_args(tmp_path), monkeypatch)
    assert got["manifest"] == {"data": {"env_python": sys.executable, "x": 1}, "error": None}
    assert got["python"] == sys.executable and got["run_dir_error"] == ""
    assert (tmp_path / "work" / "run1" / "node1").is_dir()
    # gpufleet.verify.workers.gpus: a count when this interpreter has torch, else exit 3 naming it
    if importlib.util.find_spec("torch") is not None:
        assert got["gpus"]["rc"] == 0 and got["gpus"]["stdout"].isdigit()
        # the same gpufleet here and "on the node": not stale
        assert got["package"]["node"] == got["package"]["controller"] != ""
        assert got["package"]["stale"] is False
    else:
        assert got["gpus"]["rc"] == 3 and "torch" in got["gpus"]["stderr"]


def test_prepare_without_manifest_uses_the_default_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _action(
        verify_prepare.ActionModule,
        _prepare_args(tmp_path, default_python="/nonexistent/bin/python"),
        monkeypatch,
    )
    assert got["manifest"] == {"data": {}, "error": None}
    assert got["python"] == "/nonexistent/bin/python"
    assert got["gpus"]["rc"] not in (0, None)  # the missing python is named by the role


def test_prepare_explicit_python_wins_over_the_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"env_python": "/opt/other/python"}))
    got = _action(
        verify_prepare.ActionModule, _prepare_args(tmp_path, python=sys.executable), monkeypatch
    )
    assert got["python"] == sys.executable


@pytest.mark.parametrize(
    ("content", "error"),
    [("{trunc", "is not valid JSON"), ("[1]", "holds a JSON list"), ("  \n", "is empty")],
)
def test_prepare_names_a_broken_manifest_and_counts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, error: str
) -> None:
    (tmp_path / "manifest.json").write_text(content)
    calls: list[str] = []

    def run(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
        calls.append(cmd)
        return _local(cmd)

    got = _action(verify_prepare.ActionModule, _prepare_args(tmp_path), monkeypatch, run)
    assert error in got["manifest"]["error"] and "node1" in got["manifest"]["error"]
    assert got["gpus"]["rc"] is None and len(calls) == 1


def test_prepare_refuses_a_run_dir_that_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work" / "run1" / "node1").mkdir(parents=True)
    got = _action(verify_prepare.ActionModule, _prepare_args(tmp_path), monkeypatch)
    assert "File exists" in got["run_dir_error"] and got["gpus"]["rc"] is None
    assert got["changed"] is False


def test_prepare_says_so_when_the_node_answers_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
        return {"rc": 255, "stdout": "", "stderr": "sudo: a password is required"}

    got = _action(verify_prepare.ActionModule, _prepare_args(tmp_path), monkeypatch, broken)
    assert "did not say" in got["run_dir_error"] and "password" in got["run_dir_error"]


def test_step1_parse_reads_an_empty_manifest_as_empty_content() -> None:
    assert verify_prepare._step1_parse("manifest\nrundir-ok\n") == ("", False, "")
    content, _, err = verify_prepare._step1_parse(
        "manifest " + base64.b64encode(b"{}").decode() + "\nrundir-error mkdir: No space left\n"
    )
    assert content == "e30=" and err == "mkdir: No space left"


# ------------------------------------------------------------------ fetch_results


def _fetch_args(tmp_path: Path, **kw: Any) -> dict[str, Any]:
    return {
        "python": sys.executable,
        "run_dir": str(tmp_path / "node"),
        "dest": str(tmp_path / "report" / "node1"),
        "patterns": ["*.json", "*.log"],
        "excludes": ["probe-raw.json"],
        **kw,
    }


def _fetch_run1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: str
) -> tuple[Path, dict[str, Any]]:
    """fetch_results of run1 given node1's verify lock, whose owner file reads ``owner``."""
    lock = tmp_path / ".lock.node1"
    lock.mkdir()
    (lock / "owner").write_text(owner)
    args = _fetch_args(tmp_path, lock=str(lock), run_id="run1")
    return lock, _action(fetch_results.ActionModule, args, monkeypatch)


def test_fetch_writes_the_files_and_gives_the_lock_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = tmp_path / "node"
    node.mkdir()
    (node / "allreduce.json").write_text('{"a": 1}')
    (node / "allreduce.log").write_text("log\n")
    (node / "probe-raw.json").write_text("{}")
    (node / "allreduce.pid").write_text("1")
    lock, got = _fetch_run1(tmp_path, monkeypatch, "run1 1 ctl\n")
    assert got["files"] == ["allreduce.json", "allreduce.log"] and got["released"] is True
    assert got["changed"] is True and not lock.exists()
    assert (tmp_path / "report" / "node1" / "allreduce.json").read_text() == '{"a": 1}'
    assert not (tmp_path / "report" / "node1" / "probe-raw.json").exists()


def test_fetch_leaves_another_runs_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock, got = _fetch_run1(tmp_path, monkeypatch, "other 1 ctl\n")
    assert got["released"] is False and (lock / "owner").is_file() and got["files"] == []


def test_fetch_fails_naming_the_node_when_the_env_has_no_gpufleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_module(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
        return {
            "rc": 1,
            "stdout": "",
            "stderr": "/usr/bin/python3: No module named gpufleet.verify.result_pack",
        }

    got = _action(fetch_results.ActionModule, _fetch_args(tmp_path), monkeypatch, no_module)
    assert got["failed"] is True
    assert got["msg"].startswith("node1: cannot pack") and "No module named" in got["msg"]


def test_fetch_refuses_what_a_node_should_not_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escape.json")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"{}"))
    answer = json.dumps(
        {
            "format": "gpufleet-pack-1",
            "files": [],
            "skipped": [],
            "released": False,
            "tar": base64.b64encode(buf.getvalue()).decode(),
        }
    )

    def hostile(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
        return {"rc": 0, "stdout": answer + "\n", "stderr": ""}

    got = _action(fetch_results.ActionModule, _fetch_args(tmp_path), monkeypatch, hostile)
    assert got["files"] == [] and got["refused"][0]["name"] == "../../escape.json"
    assert "files not written" in got["warnings"][0]
    assert not (tmp_path / "escape.json").exists()


# ------------------------------------------------------------------ sync_suites


def test_sync_suites_installs_once_then_leaves_the_node_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / "checks").mkdir(parents=True)
    (repo / "checks" / "conftest.py").write_text("A = 1\n")
    args = {
        "python": sys.executable,
        "src": str(repo),
        "names": ["checks"],
        "dest": str(tmp_path / "node" / "suites"),
    }
    first = _action(sync_suites.ActionModule, args, monkeypatch)
    again = _action(sync_suites.ActionModule, args, monkeypatch)
    assert (first["changed"], again["changed"]) == (True, False)
    assert first["digest"] == again["digest"]
    assert (tmp_path / "node" / "suites" / "checks" / "conftest.py").read_text() == "A = 1\n"


def test_sync_suites_names_the_node_when_the_install_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / "checks").mkdir(parents=True)
    ro = tmp_path / "ro"
    ro.write_text("a file where the directory should be")
    args = {"python": sys.executable, "src": str(repo), "names": ["checks"], "dest": str(ro)}
    got = _action(sync_suites.ActionModule, args, monkeypatch)
    assert got["failed"] is True and got["msg"].startswith("node1: cannot install the suites")


def test_prepare_names_a_node_env_with_another_gpufleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An env provisioned from an older checkout: its gpus worker prints no digest (or
    another one); verify must stop and say make provision, not fail later in the pre-check."""
    answers = iter(["4\n", "4\ngpufleet 0123abcd\n"])

    def node(cmd: str, sudoable: bool = True, in_data: bytes | None = None) -> dict[str, Any]:
        if "gpufleet.verify.workers.gpus" in cmd:
            assert "--package-digest" in cmd
            return {"rc": 0, "stdout": next(answers), "stderr": ""}
        return _local(cmd)

    for i in range(2):
        got = _action(
            verify_prepare.ActionModule,
            _prepare_args(tmp_path, run_dir=str(tmp_path / "w" / str(i))),
            monkeypatch,
            node,
        )
        assert got["gpus"]["stdout"] == "4"
        assert got["package"]["stale"] is True
        assert got["package"]["node"] == ("" if i == 0 else "0123abcd")
