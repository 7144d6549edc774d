"""``dcgmi diag -r <level> -j`` JSON -> records (one per diagnostic test).

DCGM's diagnostic (NVVS) prints, with ``-j``::

    {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment" | "Hardware" | "Integration" | "Performance" | ...,
         "tests": [{"name": "...", "results": [
             {"gpu_ids": "0" (or "0,1,..." for software tests), "status": "Pass|Fail|Warn|Skip",
              "warnings": [{"warning": "...", "error_id": N} | "..."], "info": ["..."]}]}]}],
      "version": "3.3.5"}}

(the format documented in DCGM's ``nvvs`` JsonOutput; DCGM user guide,
https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html). A
``null`` entry in a ``tests`` list (seen in real output) is ignored. The root key
``"DCGM Diagnostic"`` is accepted too. Only this documented layout is parsed: a document
without ``test_categories`` is one failing ``dcgm_diag`` record, never a pass.

:func:`run_diag` runs ``dcgmi diag -r <level> -j`` with a bound on its time (``gpufleet dcgm
diag``, verify's DCGM step); :func:`packages` names what the dcgm role installs from
NVIDIA's repository: DCGM 4 ``datacenter-gpu-manager-4-cuda<CUDA major>``, DCGM 3
``datacenter-gpu-manager`` (DCGM user guide, installation; service ``nvidia-dcgm``).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufleet.node.health._common import rec as make_record
from gpufleet.results import Record, Status

DCGM_DIAG = "dcgm_diag"
LEVELS = (1, 2, 3, 4)
SERVICE = "nvidia-dcgm"
ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
REMEDY = (
    "read DCGM's warning above (error id in the DCGM error table); rerun `dcgmi diag -r 3` "
    "on the drained node, and open a hardware ticket if the GPU fails again"
)
_STATUS: Mapping[str, Status] = {
    "pass": "pass",
    "fail": "fail",
    "warn": "warn",
    "warning": "warn",
    "skip": "skip",
    "skipped": "skip",
    "not run": "skip",
}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _warnings(result: Mapping[str, Any]) -> list[str]:
    out = []
    for w in result.get("warnings") or ():
        if isinstance(w, Mapping):
            text = str(w.get("warning", "")).strip()
            if w.get("error_id") is not None:
                text += f" (DCGM error id {w['error_id']})"
            out.append(text)
        else:
            out.append(str(w).strip())
    return [w for w in out if w]


def parse(text: str, level: int | None = None) -> list[Record]:
    """One record per DCGM test (``dcgm_<test name>``); worst GPU status wins."""
    where = f"dcgmi diag -r {level}" if level is not None else "dcgmi diag"
    start = text.find("{")  # dcgmi may print a warning line before the JSON
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except ValueError as exc:
        data, error = None, f"not JSON ({exc})"
    else:
        error = "no DCGM diagnostic object in the output"
    root = next((data[k] for k in ROOT_KEYS if isinstance(data, dict) and k in data), None)
    categories = root.get("test_categories") if isinstance(root, dict) else None
    if not isinstance(categories, list):
        if isinstance(root, dict):
            error = str(root.get("runtime_error") or "no test_categories in the output")
        return [
            make_record(
                DCGM_DIAG, "fail", f"{where}: no results: {error}.",
                threshold="test results", remedy="run `dcgmi diag -r 1 -j` by hand; check "
                "that nvidia-dcgm is running (`systemctl status nvidia-dcgm`)",
            )
        ]  # fmt: skip
    records = []
    order: tuple[Status, ...] = ("fail", "warn", "pass", "skip")
    for cat in categories:
        for test in (cat or {}).get("tests") or ():
            if not isinstance(test, Mapping):
                continue
            name = str(test.get("name", "unknown"))
            per_gpu: dict[str, Status] = {}
            problems: list[str] = []
            for res in test.get("results") or ():
                if not isinstance(res, Mapping):
                    continue
                status = _STATUS.get(str(res.get("status", "")).strip().lower(), "fail")
                gpus = str(res.get("gpu_ids", res.get("gpu_id", "?")))
                per_gpu[gpus] = status
                if status in ("fail", "warn"):
                    why = "; ".join(_warnings(res)) or "no reason given"
                    problems.append(f"GPU {gpus}: {status.upper()} {why}")
            worst: Status = min(per_gpu.values(), key=order.index, default="skip")
            label = f"{where} {cat.get('category', '')}/{name}"
            if worst in ("fail", "warn"):
                message = f"{label}: " + "; ".join(problems) + "."
            elif worst == "pass":
                message = f"{label}: pass on GPU(s) {', '.join(per_gpu)}."
            else:
                message = f"{label}: skipped by DCGM."
            records.append(
                make_record(
                    f"dcgm_{_slug(name)}", worst, message, value=per_gpu,
                    threshold="Pass", remedy=REMEDY,
                )
            )  # fmt: skip
    return records


def packages(major: int | str, cuda: str | None) -> list[str]:
    """DCGM packages of NVIDIA's repository for DCGM ``major`` and the plan's CUDA ``X.Y``."""
    major = int(major)
    if major == 3:
        return ["datacenter-gpu-manager"]
    if major != 4:
        raise ValueError(f"dcgm_major={major!r}: choose 3 or 4")
    if not cuda:
        raise ValueError("DCGM 4 needs the plan's CUDA version (the cpu wheel has none)")
    return [f"datacenter-gpu-manager-4-cuda{str(cuda).split('.')[0]}"]


@dataclass
class DiagRun:
    """One ``dcgmi diag`` run: its records, output (for the log) and wall time."""

    level: int
    records: list[Record] = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    returncode: int | None = None


def run_diag(
    level: int, timeout_s: float, dcgmi: str = "dcgmi", argv: Sequence[str] | None = None
) -> DiagRun:
    """``dcgmi diag -r LEVEL -j``, killed after ``timeout_s``: records from its JSON, or one
    incomplete ``dcgm_diag`` record saying why there are none (not installed, timed out):
    DCGM could not judge the GPUs, which is not a GPU fault."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: choose one of {', '.join(map(str, LEVELS))}")
    cmd = list(argv) if argv else [dcgmi, "diag", "-r", str(level), "-j"]
    where = f"dcgmi diag -r {level}"
    run = DiagRun(level)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        run.records.append(
            make_record(
                DCGM_DIAG, "incomplete", f"{where}: {cmd[0]} not found: DCGM is not installed.",
                threshold="test results",
                remedy="provision with gpufleet_dcgm: true (role dcgm installs DCGM from "
                "NVIDIA's repository), or set verify_dcgm: false",
            )
        )  # fmt: skip
        return run
    except subprocess.TimeoutExpired as exc:
        run.seconds = time.monotonic() - start
        out = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode()
        run.output = out
        run.records.append(
            make_record(
                DCGM_DIAG, "incomplete",
                f"{where} did not finish within {timeout_s:g} s (killed).",
                value=round(run.seconds, 1), threshold=f"<= {timeout_s:g} s",
                remedy="raise verify_dcgm_timeout (level 3 and 4 take tens of minutes) or "
                "lower verify_dcgm_level; check `systemctl status nvidia-dcgm`",
            )
        )  # fmt: skip
        return run
    run.seconds = time.monotonic() - start
    run.returncode = proc.returncode
    run.output = proc.stdout + (("\n" + proc.stderr) if proc.stderr else "")
    run.records = parse(proc.stdout or proc.stderr, level)
    return run
