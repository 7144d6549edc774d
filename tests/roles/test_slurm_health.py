"""The slurm_health role on this machine (local connection, paths redirected into a temporary
folder, a fake scontrol): it installs the wrapper, writes the HealthCheck lines into
slurm.conf only when asked and then reconfigures once, and a rerun changes nothing. The
wrapper itself drains through scontrol; the real Slurm is in tests/integration/test_demo.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from playbook_runner import ansible_env, run_playbook

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

SITE_CONF = "ClusterName=site\nNodeName=gpu7 CPUs=8\nHealthCheckInterval=60\n"


def play(tmp: Path, **role_vars: object) -> Path:
    path = tmp / "play.yml"
    path.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                        "gpufleet_config_dir": str(tmp / "etc"),
                        "gpufleet_state_dir": str(tmp / "state"),
                        "gpufleet_slurm_health": True,
                        "gpufleet_slurm_node_name": "gpu7",
                        "slurm_health_python": sys.executable,
                        "slurm_health_wrapper": str(tmp / "sbin" / "gpufleet-healthcheck"),
                        "slurm_health_slurm_conf": str(tmp / "slurm" / "slurm.conf"),
                        "gpufleet_health_textfile_dir": str(tmp / "textfile"),
                        **role_vars,
                    },
                    "roles": [{"role": "slurm_health"}],
                }
            ]
        )
    )
    return path


def run(tmp: Path, **role_vars: object) -> subprocess.CompletedProcess[str]:
    env = ansible_env({"PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"})
    return run_playbook(play(tmp, **role_vars), inventory="localhost,", env=env, timeout=300)


def changed(stdout: str) -> int:
    m = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", stdout)
    assert m, stdout[-5000:]
    return int(m.group(1))


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "sbin").mkdir()
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "slurm.conf").write_text(SITE_CONF)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "scontrol.log"
    (bindir / "scontrol").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\n'
        '[ "$1" = show ] && echo "NodeName=gpu7 State=IDLE Reason=(null)"\nexit 0\n'
    )
    (bindir / "scontrol").chmod(0o755)
    return tmp_path


def test_wrapper_installed_conf_left_alone_unless_asked(site: Path) -> None:
    r = run(site)
    assert r.returncode == 0, r.stdout[-5000:]
    wrapper = site / "sbin" / "gpufleet-healthcheck"
    assert wrapper.stat().st_mode & 0o777 == 0o755
    text = wrapper.read_text()
    assert "--slurm --slurm-node gpu7 --drain-after 2 --timeout 30" in text
    # the passes are counted in the state the timer (role health_timer) shares; a verdict
    # holds three HealthCheckInterval periods (300 s)
    assert f"--state {site}/state/health-state.json --valid-hours 0.25" in text
    assert f"--textfile {site}/textfile/gpufleet.prom" in text
    assert (site / "slurm" / "slurm.conf").read_text() == SITE_CONF, "edited without being asked"
    said = " ".join(r.stdout.split())
    assert f"HealthCheckProgram={wrapper}; HealthCheckInterval=300" in said
    assert not (site / "scontrol.log").exists(), "reconfigured without being asked"
    # the wrapper, run as slurmd runs it: this machine is healthy, nothing to drain
    w = subprocess.run(["bash", str(wrapper)], capture_output=True, text=True, check=False,
                       env={"PATH": f"{site / 'bin'}:/usr/bin:/bin"}, timeout=120)  # fmt: skip
    assert w.returncode == 0, w.stdout + w.stderr
    assert (site / "scontrol.log").read_text().splitlines() == ["show node -o gpu7"]
    verdict = json.loads((site / "state" / "health.json").read_text())
    assert verdict["kind"] == "health" and verdict["meta"]["slurm"]["action"] == "none"
    prom = (site / "textfile" / "gpufleet.prom").read_text()  # the same file as the timer's
    assert "gpufleet_health_slurm_drained 0" in prom.splitlines()


def test_no_textfile_when_the_directory_is_empty_and_drain_after_as_set(site: Path) -> None:
    r = run(site, slurm_health_textfile_dir="", slurm_health_drain_after=1)
    assert r.returncode == 0, r.stdout[-5000:]
    text = (site / "sbin" / "gpufleet-healthcheck").read_text()
    assert "--drain-after 1 " in text and "--textfile" not in text
    assert not (site / "textfile").exists()


def test_conf_written_when_asked_then_a_rerun_changes_nothing(site: Path) -> None:
    r = run(site, slurm_health_edit_slurm_conf=True, slurm_health_interval=15)
    assert r.returncode == 0, r.stdout[-5000:]
    conf = (site / "slurm" / "slurm.conf").read_text()
    wrapper = site / "sbin" / "gpufleet-healthcheck"
    assert f"HealthCheckProgram={wrapper}\n" in conf
    assert "HealthCheckInterval=15\n" in conf and "HealthCheckInterval=60" not in conf
    assert "HealthCheckNodeState=ANY\n" in conf
    assert conf.startswith("ClusterName=site\nNodeName=gpu7 CPUs=8\n"), "site lines kept"
    assert (site / "scontrol.log").read_text().splitlines() == ["reconfigure"]
    again = run(site, slurm_health_edit_slurm_conf=True, slurm_health_interval=15)
    assert again.returncode == 0, again.stdout[-5000:]
    assert changed(again.stdout) == 0
    assert (site / "scontrol.log").read_text().splitlines() == ["reconfigure"]


def test_off_by_default_and_refuses_an_env_without_gpufleet(site: Path) -> None:
    r = run(site, gpufleet_slurm_health=False)
    assert r.returncode == 0 and not (site / "sbin" / "gpufleet-healthcheck").exists()
    bare = site / "bare-python"
    bare.write_text("#!/bin/sh\necho 'No module named gpufleet' >&2\nexit 1\n")
    bare.chmod(0o755)
    r = run(site, slurm_health_python=str(bare))
    assert r.returncode != 0
    said = " ".join(r.stdout.split())
    assert "cannot run `gpufleet health`" in said and "No module named gpufleet" in said
    assert not (site / "sbin" / "gpufleet-healthcheck").exists()
