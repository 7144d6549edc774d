"""gpufleet.core.dropouts: the reason a node dropped out, and which failures count."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from roles_driver_helpers import install_collection_finder

install_collection_finder()

from ansible_collections.gpufleet.core.plugins.callback import dropouts  # noqa: E402


def _result(host: str, task: Any, res: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(_host=SimpleNamespace(get_name=lambda: host), _task=task, _result=res)


def _task(name: str, parent: Any = None) -> SimpleNamespace:
    return SimpleNamespace(get_name=lambda: name, _parent=parent)


def test_reason_quotes_task_message_and_last_stderr_line() -> None:
    text = dropouts.reason(
        "verify : Copy the suites", {"msg": "non-zero return code", "stderr": "a\nNo space left"}
    )
    assert text == "verify : Copy the suites: non-zero return code | No space left"
    loop = {"msg": "One or more items failed", "results": [{"failed": True, "msg": "x"}, {}]}
    assert dropouts.reason("t", loop) == "t: One or more items failed | x"


def test_first_unrescued_failure_per_host_lands_in_the_run_dir(tmp_path: Path) -> None:
    cb = dropouts.CallbackModule()
    run = tmp_path / "rep" / "r1"
    cb.v2_runner_on_failed(_result("n1", _task("before the layout"), {"msg": "early"}))
    cb.v2_runner_on_ok(
        _result("n1", _task("layout"), {"ansible_facts": {"__verify_report_run": str(run)}})
    )
    rescued = _task("inside", parent=SimpleNamespace(rescue=[object()], _parent=None))
    cb.v2_runner_on_failed(_result("n1", rescued, {"msg": "handled"}))
    cb.v2_runner_on_failed(_result("n1", _task("ignored"), {"msg": "x"}), ignore_errors=True)
    cb.v2_runner_on_failed(
        _result("n2", _task("verify : Stop on a broken node manifest"), {"msg": "bad json"})
    )
    cb.v2_runner_on_failed(_result("n2", _task("later"), {"msg": "second"}))
    cb.v2_runner_on_unreachable(
        _result("n3", _task("verify : Take the lock"), {"msg": "ssh: timed out"})
    )
    data = json.loads((run / "dropouts.json").read_text())
    assert data == {
        "n2": "verify : Stop on a broken node manifest: bad json",
        "n3": "unreachable (verify : Take the lock): ssh: timed out",
    }
