"""The health_timer role on this machine (local connection, paths redirected into a temporary
folder, systemctl scripted by tests/fakes/fake_pm.py: systemd is not PID 1 here, so no unit
can start). What runs for real: the role's tasks and templates, and the service's ExecStart
command itself, run as systemd would run it, which writes node_exporter's textfile (checked
by promtool where it is installed). The timer firing under a real systemd and node_exporter
serving the file to Prometheus are in tests/integration/test_demo.py (make e2e, testbed)."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from playbook_runner import ansible_env, run_playbook
from roles_driver_helpers import FAKES

pytestmark = [pytest.mark.ansible, pytest.mark.slow]


class Node:
    """This machine as a node: every path of the role under ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.units = tmp / "units"
        self.units.mkdir()
        self.textfile_dir = tmp / "node_exporter" / "textfile"
        self.state_file = tmp / "systemctl-state.json"
        self.state_file.write_text(json.dumps({"installed": [], "available": [], "calls": []}))
        bindir = tmp / "bin"
        bindir.mkdir()
        (bindir / "systemctl").symlink_to(FAKES / "fake_pm.py")
        self.env = ansible_env(
            {
                "PATH": f"{bindir}:{os.environ['PATH']}",
                "FAKE_PM_STATE": str(self.state_file),
                "FAKE_UNIT_DIR": str(self.units),
            }
        )

    def run(self, **role_vars: object) -> subprocess.CompletedProcess[str]:
        play = self.tmp / "play.yml"
        play.write_text(json.dumps([{
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "gpufleet_config_dir": str(self.tmp / "etc"),
                "gpufleet_state_dir": str(self.tmp / "state"),
                "gpufleet_health_timer": True,
                "gpufleet_health_textfile_dir": str(self.textfile_dir),
                "health_timer_python": sys.executable,
                "health_timer_interval": "15s",
                **role_vars,
            },
            "roles": [{"role": "health_timer"}],
        }]))  # fmt: skip
        return run_playbook(
            play, "-e", f"__health_timer_unit_dir={self.units}",
            inventory="localhost,", env=self.env, timeout=300,
        )  # fmt: skip

    def systemctl(self) -> list[list[str]]:
        """The systemctl calls since the last look (and forgets them)."""
        state: dict[str, Any] = json.loads(self.state_file.read_text())
        calls: list[list[str]] = state["calls"]
        state["calls"] = []
        self.state_file.write_text(json.dumps(state))
        return [c[1:] for c in calls if c[1:2] != ["show"]]

    def timer(self) -> dict[str, bool]:
        units: dict[str, dict[str, bool]] = json.loads(self.state_file.read_text())["units"]
        return units["gpufleet-health.timer"]

    def unit(self, name: str) -> configparser.ConfigParser:
        parser = configparser.ConfigParser(interpolation=None, strict=True)
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        parser.read_string((self.units / name).read_text())
        return parser


def changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", stdout)
    assert m, stdout[-5000:]
    return int(m.group(1))


def started(calls: list[list[str]]) -> bool:
    return any(c[:1] == ["start"] and c[-1] == "gpufleet-health.timer" for c in calls)


def test_units_installed_timer_enabled_and_started_then_a_rerun_changes_nothing(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path)
    r = node.run()
    assert r.returncode == 0, r.stdout[-6000:]
    timer = node.unit("gpufleet-health.timer")
    assert timer["Timer"]["OnUnitActiveSec"] == "15s"
    assert timer["Timer"]["OnActiveSec"] == "10s"  # a first pass soon after start
    assert timer["Install"]["WantedBy"] == "timers.target"
    service = node.unit("gpufleet-health.service")
    assert service["Service"]["Type"] == "oneshot"
    argv = shlex.split(service["Service"]["ExecStart"])
    assert argv[:4] == [sys.executable, "-m", "gpufleet", "health"]
    opts = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert opts["--textfile"] == f"{node.textfile_dir}/gpufleet.prom"
    assert opts["--state"] == f"{tmp_path}/state/health-state.json"  # shared with slurm_health
    assert opts["--output"] == f"{tmp_path}/state/health.json"
    assert float(opts["--valid-hours"]) * 3600 == pytest.approx(45)  # three intervals
    assert "--slurm" not in argv  # the timer never drains
    assert int(service["Service"]["TimeoutStartSec"]) > int(opts["--timeout"])
    assert node.textfile_dir.is_dir() and node.textfile_dir.stat().st_mode & 0o777 == 0o755
    calls = node.systemctl()
    assert ["daemon-reload"] in calls and started(calls)
    assert node.timer() == {"enabled": True, "active": True}

    again = node.run()
    assert again.returncode == 0, again.stdout[-6000:]
    assert changed(again.stdout) == 0
    assert not started(node.systemctl())


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze not installed (Debian: systemd)",
)
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    """systemd's own parser on the rendered units (systemd-analyze verify works without a
    running systemd): every key known, every value parsed, the timer's unit found."""
    node = Node(tmp_path)
    assert node.run(health_timer_interval="1h 30min").returncode == 0
    r = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", "./gpufleet-health.timer",
         "./gpufleet-health.service"],
        cwd=node.units, capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "info"},
    )  # fmt: skip
    said = [line for line in (r.stdout + r.stderr).splitlines() if "gpufleet-health" in line]
    assert r.returncode == 0 and not said, r.stdout + r.stderr


def test_a_new_interval_rewrites_the_timer_and_restarts_it_once(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.run().returncode == 0
    node.systemctl()
    r = node.run(health_timer_interval="1h 30min")
    assert r.returncode == 0, r.stdout[-6000:]
    assert node.unit("gpufleet-health.timer")["Timer"]["OnUnitActiveSec"] == "5400s"
    calls = node.systemctl()
    assert calls.count(["restart", "gpufleet-health.timer"]) == 1, calls
    assert ["daemon-reload"] in calls


def test_an_existing_textfile_directory_keeps_the_sites_mode(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.textfile_dir.mkdir(parents=True)
    node.textfile_dir.chmod(0o775)
    assert node.run().returncode == 0
    assert node.textfile_dir.stat().st_mode & 0o777 == 0o775


def test_turned_off_the_timer_is_stopped_and_its_units_removed(tmp_path: Path) -> None:
    node = Node(tmp_path)
    assert node.run().returncode == 0
    node.systemctl()
    r = node.run(gpufleet_health_timer=False)
    assert r.returncode == 0, r.stdout[-6000:]
    assert sorted(p.name for p in node.units.iterdir()) == []
    calls = node.systemctl()
    assert ["stop", "gpufleet-health.timer"] in calls
    assert ["disable", "gpufleet-health.timer"] in calls
    again = node.run(gpufleet_health_timer=False)
    assert again.returncode == 0 and changed(again.stdout) == 0
    assert node.systemctl() == []


def test_refuses_an_env_without_gpufleet_before_writing_a_unit(tmp_path: Path) -> None:
    node = Node(tmp_path)
    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\necho 'No module named gpufleet' >&2\nexit 1\n")
    bare.chmod(0o755)
    r = node.run(health_timer_python=str(bare))
    assert r.returncode != 0
    said = " ".join(r.stdout.split())
    assert "cannot run `gpufleet health`" in said and "set health_timer_python" in said
    assert list(node.units.iterdir()) == []


def test_the_service_command_writes_the_textfile_and_counts_the_pass(tmp_path: Path) -> None:
    """ExecStart as systemd runs it (argv split by the unit's own quoting, no shell): this
    machine's pass lands in node_exporter's textfile directory, atomically, with the state."""
    node = Node(tmp_path)
    assert node.run().returncode == 0
    argv = shlex.split(node.unit("gpufleet-health.service")["Service"]["ExecStart"])
    first = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=180)
    assert first.returncode in (0, 1, 3), first.stdout + first.stderr
    prom = node.textfile_dir / "gpufleet.prom"
    assert sorted(p.name for p in node.textfile_dir.iterdir()) == ["gpufleet.prom"]
    text = prom.read_text()
    assert "gpufleet_health_last_run_timestamp_seconds " in text
    state = json.loads((tmp_path / "state" / "health-state.json").read_text())
    assert state["last_run"] is not None
    promtool = shutil.which("promtool")
    if promtool is not None:  # make lint installs it (make monitor-deps)
        lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                              text=True, check=False, timeout=60)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr
