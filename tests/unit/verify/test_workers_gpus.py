"""gpufleet.verify.workers.gpus: the ranks per node verify launches, from the driver, not torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpufleet.verify.workers import gpus


def test_nvml_count_wins_over_proc(tmp_path: Path) -> None:
    (tmp_path / "0000:3b:00.0").mkdir()
    assert gpus.gpu_count(nvml=lambda: 8, root=tmp_path) == 8
    assert gpus.gpu_count(nvml=lambda: 0, root=tmp_path) == 0


def test_without_nvml_the_driver_proc_entries_count(tmp_path: Path) -> None:
    for bus in ("0000:3b:00.0", "0000:5e:00.0"):
        (tmp_path / bus).mkdir()
    (tmp_path / "stray-file").write_text("")
    assert gpus.gpu_count(nvml=lambda: None, root=tmp_path) == 2
    assert gpus.gpu_count(nvml=lambda: None, root=tmp_path / "absent") == 0


def test_cli_prints_zero_here_and_refuses_an_env_without_torch(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "gpufleet.verify.workers.gpus"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (ok.returncode, ok.stdout.strip()) == (0, "0"), ok.stderr
    # a bare venv (no torch) running a copy of the module alone (stdlib only)
    pkg = tmp_path / "pkg" / "gpufleet" / "verify" / "workers"
    pkg.mkdir(parents=True)
    for init in (pkg.parent.parent, pkg.parent, pkg):
        (init / "__init__.py").write_text("")
    (pkg / "gpus.py").write_text(Path(gpus.__file__).read_text())
    venv = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bad = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "gpufleet.verify.workers.gpus"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(tmp_path / "pkg")},
    )
    assert bad.returncode == 3 and "No module named 'torch'" in bad.stderr, bad


def test_package_digest_is_the_controllers_tree_digest_of_this_package() -> None:
    from gpufleet.provisioning.converge_digest import tree_digest

    out = subprocess.run(
        [sys.executable, "-m", "gpufleet.verify.workers.gpus", "--package-digest"],
        capture_output=True,
        text=True,
        check=False,
    )
    count, digest_line = out.stdout.splitlines()
    assert count == "0" and out.returncode == 0, out.stderr
    assert digest_line == f"gpufleet {tree_digest(str(Path(gpus.__file__).parents[2]))}"
