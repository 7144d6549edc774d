"""Nothing hangs: the supervisor's hard timeout, a torchrun whose peer never comes,
a busbw gate that fails, and the env file read for torchrun."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from gpufleet.planning import network as netcfg
from gpufleet.verify.workers import supervise

pytestmark = pytest.mark.slow


def _smoke_conftest() -> ModuleType:
    """smoke_tests/conftest.py as a module (its torchrun_argv; the suite ships to nodes)."""
    path = Path(__file__).resolve().parents[2] / "smoke_tests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("gpufleet_smoke_conftest", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


SMOKE = _smoke_conftest()


def test_supervisor_kills_the_whole_group_on_timeout(tmp_path: Path) -> None:
    pidfile, log = tmp_path / "g.pid", tmp_path / "g.log"
    child_pids = tmp_path / "children"
    script = f"sleep 300 & echo $! > {child_pids}; sleep 300"
    t0 = time.monotonic()
    rc = supervise.main(
        [
            "--timeout",
            "1",
            "--grace",
            "1",
            "--pidfile",
            str(pidfile),
            "--log",
            str(log),
            "--",
            "bash",
            "-c",
            script,
        ]
    )
    assert rc == supervise.EXIT_TIMEOUT
    assert time.monotonic() - t0 < 8
    pgid = int(pidfile.read_text())
    assert not supervise.group_alive(pgid)
    assert not supervise.pid_alive(int(child_pids.read_text()))
    assert "ran past 1s" in log.read_text()


def test_a_sigterm_to_the_supervisor_ends_the_whole_group(tmp_path: Path) -> None:
    """Slurm's scancel (or an operator) signals the supervisor; torchrun runs in a session of
    its own, so the supervisor must take the group down with it."""
    import signal
    import subprocess
    import sys

    pidfile, log = tmp_path / "g.pid", tmp_path / "g.log"
    child_pids = tmp_path / "children"
    script = f"sleep 300 & echo $! > {child_pids}; sleep 300"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.verify.workers.supervise", "--timeout", "300", "--grace", "1",
         "--pidfile", str(pidfile), "--log", str(log), "--", "bash", "-c", script]
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (child_pids.exists() and child_pids.read_text().strip()):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 128 + signal.SIGTERM
    pgid = int(pidfile.read_text())
    gone_by = time.monotonic() + 5  # killed grandchildren are reaped by init, not by us
    while supervise.group_alive(pgid) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not supervise.group_alive(pgid)
    assert not supervise.pid_alive(int(child_pids.read_text()))
    assert "got SIGTERM; killing the process group" in log.read_text()


def test_env_file_is_parsed_like_a_shell_env_file(tmp_path: Path) -> None:
    f = tmp_path / "nccl.env"
    f.write_text("# comment\nNCCL_SOCKET_IFNAME=eth1\nexport NCCL_IB_HCA='mlx5_0'\n\nBAD\n")
    assert netcfg.read_env_file(str(f)) == {
        "NCCL_SOCKET_IFNAME": "eth1",
        "NCCL_IB_HCA": "mlx5_0",
    }
    assert netcfg.read_env_file(str(tmp_path / "absent")) == {}


def _torchrun(
    tmp_path: Path,
    *extra: str,
    nnodes: int = 1,
    rdzv_timeout: int = 5,
    nproc: int = 2,
    timeout: float = 60,
    env_file: str = "",
) -> tuple[int, float]:
    cmd = [
        sys.executable,
        "-m",
        "gpufleet.verify.workers.supervise",
        "--timeout",
        str(timeout),
        "--pidfile",
        str(tmp_path / "run.pid"),
        "--log",
        str(tmp_path / "run.log"),
        "--env-file",
        env_file,
        "--",
        *SMOKE.torchrun_argv("allreduce", nproc=nproc, rdzv_timeout=rdzv_timeout, nnodes=nnodes),
        "--out-dir",
        str(tmp_path / "ranks"),
        "--timeout",
        "10",
        "--sizes",
        "4K,64K",
        "--iters",
        "3",
        "--warmup",
        "1",
        *extra,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30, check=False)
    return proc.returncode, time.monotonic() - t0


def test_a_peer_that_never_joins_ends_the_run(tmp_path: Path) -> None:
    """nnodes=2 but only node 0 starts: the static rendezvous times out, nothing is left."""
    rc, took = _torchrun(tmp_path, nnodes=2, rdzv_timeout=5)
    assert rc != 0
    assert took < 45, f"took {took:.0f}s"
    assert not supervise.group_alive(int((tmp_path / "run.pid").read_text()))
    log = (tmp_path / "run.log").read_text()
    assert "timeout" in log.lower() or "timed out" in log.lower(), log[-2000:]


def test_busbw_gate_fails_the_run_and_env_file_reaches_the_workers(tmp_path: Path) -> None:
    env = tmp_path / "nccl.env"
    env.write_text("GPUFLEET_TEST_MARK=from-env-file\n")
    rc, _ = _torchrun(
        tmp_path,
        "--busbw-min",
        "1000000",
        "--result-json",
        str(tmp_path / "ar.json"),
        "--result-node",
        "n1",
        env_file=str(env),
    )
    assert rc != 0, "an impossible gate must fail the launch"
    data = json.loads((tmp_path / "ar.json").read_text())
    gate = next(r for r in data["records"] if r["name"] == "allreduce_busbw")
    assert gate["status"] == "fail"
    assert gate["threshold"] == 1000000
    assert data["meta"]["busbw_factor"] == 1.0
    transport = next(r for r in data["records"] if r["name"] == "nccl_transport")
    assert (transport["status"], transport["node"]) == ("skip", "n1")
    assert "backend gloo" in transport["message"]
    assert "GPUFLEET_TEST_MARK" in (tmp_path / "run.log").read_text()
