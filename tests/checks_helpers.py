"""Run the node checks suite (checks/) in a subprocess and read back its JSON records."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
MANIFEST = FIXTURES / "manifest-h100-cu128.json"


def _generate_recordings() -> Path:
    """The NVML recordings, written once per test process into a temporary folder: the
    committed base and H200 recordings plus every change set of tests/fixtures/nvml/generate.py."""
    spec = importlib.util.spec_from_file_location(
        "gpufleet_nvml_fixtures", FIXTURES / "nvml" / "generate.py"
    )
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    out = Path(tempfile.mkdtemp(prefix="gpufleet-nvml-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    generate.write_all(out)
    return out


RECORDINGS = _generate_recordings()


@dataclass
class SuiteRun:
    rc: int
    out: str
    data: dict[str, Any]
    junit: ET.Element

    @property
    def records(self) -> list[dict[str, Any]]:
        return list(self.data["records"])

    def find(self, name: str, gpu: int | None = None) -> dict[str, Any]:
        hits = [r for r in self.records if r["name"] == name and gpu_index(r) == gpu]
        assert len(hits) == 1, f"{name} gpu={gpu}: {len(hits)} records\n{self.out}"
        return hits[0]

    def statuses(self) -> dict[tuple[str, int | None], str]:
        return {(r["name"], gpu_index(r)): r["status"] for r in self.records}


def gpu_index(record: dict[str, Any]) -> int | None:
    gpu = record.get("gpu")
    return None if gpu is None else int(str(gpu).split(" ", 1)[0])


def run_suite(tmp: Path, *args: str, env: dict[str, str] | None = None) -> SuiteRun:
    out_json, out_xml = tmp / "checks.json", tmp / "checks.xml"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "CUDA_VIS"))}
    full_env["PYTHONPATH"] = str(REPO / "src")
    full_env.update(env or {})
    proc = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-c", str(REPO / "checks" / "pytest.ini"),
            str(REPO / "checks"), "-p", "no:cacheprovider",
            f"--gpufleet-json={out_json}", f"--junitxml={out_xml}", *args,
        ],
        capture_output=True, text=True, env=full_env, cwd=tmp, timeout=300, check=False,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert out_json.is_file(), f"no JSON written (rc={proc.returncode})\n{text}"
    return SuiteRun(
        rc=proc.returncode,
        out=text,
        data=json.loads(out_json.read_text()),
        junit=ET.parse(out_xml).getroot(),
    )
