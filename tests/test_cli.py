"""The real entry point: exit codes, JSON keys, stderr, speed."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.matrix import render_markdown, update_readme

REQUIRED_KEYS = {
    "torch",
    "variant",
    "index_url",
    "requirement",
    "toolkit_package",
    "min_driver",
    "driver_branch",
    "driver_flavor",
    "repo",
}


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "plan",
            "--torch",
            "2.11.0",
            "--cuda",
            "cu126",
            "--os",
            "rocky9",
            "--driver",
            "570.86.15",
            "--gpu-arch",
            "sm_80,sm_90",
            "--python",
            "3.11",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert REQUIRED_KEYS <= set(out)
    assert out["variant"] == "cu126" and out["repo"] == "rhel9"
    assert out["requirement"] == "torch==2.11.0"


def test_plan_human_explains_new_user_case(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--torch", "2.11.0", "--driver", "570.86.15"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "torch 2.11.0 (cu128)" in out
    assert "cu130 is excluded: it needs NVIDIA driver >= 580" in out
    assert "--index-url https://download.pytorch.org/whl/cu128" in out


def test_refusal_exits_2_with_paragraph_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--torch", "2.11.0", "--cuda", "cu130", "--driver", "570.86.15"])
    cap = capsys.readouterr()
    assert rc == 2
    assert cap.out == ""
    assert cap.err.startswith("ERROR: Refused: torch 2.11.0 with cu130 cannot work")
    assert cap.err.count("\n") == 1  # one paragraph


def test_usage_error_is_argparse_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["plan"])
    assert info.value.code == 2
    assert "--torch" in capsys.readouterr().err


def test_readme_matrix_is_generated_from_data(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    assert update_readme(readme) == readme, "README support matrix is stale: run make matrix"
    assert "| 2.15 | 2.15.0 |" in render_markdown()


def test_plan_is_fast_and_never_imports_torch() -> None:
    code = (
        "import sys, time; t=time.perf_counter(); from gpufleet.cli import main; "
        "main(['plan','--torch','2.11.0','--driver','570.86.15','--json']); "
        "assert 'torch' not in sys.modules and 'pynvml' not in sys.modules, 'heavy import';"
        "sys.stderr.write(str(time.perf_counter()-t))"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    assert json.loads(proc.stdout)["variant"] == "cu128"
    # Generous bound for a loaded 2-core CI machine; the benchmark records the real figure.
    assert wall < 2.0, f"gpufleet plan took {wall:.2f}s"
