"""The fast node health run (``gpufleet health``): the checks a scheduler's health-check
program can afford every few minutes, in one process, without torch.

What it checks, each a :class:`gpufleet.results.Record` with the same names as the checks
suite (checks/) where the check is the same:

* node: the gpufleet manifest is readable (``manifest``), the env python it names exists
  (``env_python``), the interfaces named in nccl.env exist (``nccl_env_interfaces``);
* NVML: driver loaded and at least the plan's floor, GPU count against the manifest and
  the PCI bus, and per GPU: readable, persistence mode, volatile uncorrectable ECC,
  page retirement, row remapping, NVLink; the NVSwitch fabric state; Xid errors in the
  kernel log window.

Nothing here imports torch or loads a GPU: the slow checks (torch arch, PCIe under load,
the smoke tests) stay in ``make verify``. A node without a driver skips the GPU checks
unless ``require_gpu`` (manifest or option) says it must have one, as in checks/.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpufleet.node import facts as nodefacts
from gpufleet.node import health, netprobe, xid
from gpufleet.node import nvswitch as fabric
from gpufleet.node.nvml import NodeReading, NvmlReader, NvmlUnavailable, RecordedReader
from gpufleet.planning import network as netcfg
from gpufleet.results import Record

DEFAULT_MANIFEST = Path("/etc/gpufleet/manifest.json")
DEFAULT_ENV_FILE = Path("/etc/gpufleet/nccl.env")
MANIFEST = "manifest"
ENV_PYTHON = "env_python"
NCCL_ENV = "nccl_env_interfaces"
TRUTHY = {"1", "true", "yes", "on"}


@dataclass
class NodeFacts:
    """What the node-level checks read (a test passes its own)."""

    manifest_path: Path | None
    manifest: dict[str, Any] | None  # None: missing or unreadable
    manifest_error: str = ""
    env: dict[str, str] = field(default_factory=dict)  # nccl.env contents
    env_file: Path | None = None
    interfaces: list[str] = field(default_factory=list)


def read_manifest(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(manifest, error): (None, "") when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, f"{path} is not valid JSON ({exc}); a full disk can leave it truncated"
    if not isinstance(data, dict):
        return None, f"{path} holds {type(data).__name__}, not a JSON object"
    return data, ""


def read_node_facts(manifest_path: Path = DEFAULT_MANIFEST) -> NodeFacts:
    manifest, error = read_manifest(manifest_path)
    raw_env = (manifest or {}).get("env_file")
    env_file = Path(raw_env) if isinstance(raw_env, str) and raw_env else DEFAULT_ENV_FILE
    env = netcfg.read_env_file(str(env_file)) if env_file.is_file() else {}
    return NodeFacts(
        manifest_path=manifest_path,
        manifest=manifest,
        manifest_error=error,
        env=env,
        env_file=env_file if env_file.is_file() else None,
        interfaces=netprobe.node_interfaces(),
    )


def require_gpu_from(manifest: dict[str, Any] | None, option: bool | None) -> bool:
    if option is not None:
        return option
    raw = (manifest or {}).get("require_gpu")
    if raw is not None:
        return raw if isinstance(raw, bool) else str(raw).strip().lower() in TRUTHY
    return os.environ.get("GPUFLEET_REQUIRE_GPU", "").strip().lower() in TRUTHY


def expected_gpus_from(manifest: dict[str, Any] | None, option: int | None) -> int | None:
    if option is not None:
        return option
    raw = (manifest or {}).get("gpus_expected")
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


def node_records(facts: NodeFacts, *, is_exec: Callable[[str], bool] | None = None) -> list[Record]:
    """manifest, env_python, nccl_env_interfaces."""
    runnable = is_exec or (lambda p: os.path.isfile(p) and os.access(p, os.X_OK))
    out: list[Record] = []
    where = str(facts.manifest_path or DEFAULT_MANIFEST)
    if facts.manifest_error:
        out.append(
            Record(
                name=MANIFEST,
                status="fail",
                value="unreadable",
                threshold="a JSON object",
                message=f"the gpufleet manifest is broken: {facts.manifest_error}. Fix: run "
                "`make provision` for this node (it rebuilds the manifest)",
                remedy="make provision (rebuilds the manifest)",
            )
        )
    elif facts.manifest is None:
        out.append(
            Record(
                name=MANIFEST,
                status="skip",
                message=f"no gpufleet manifest at {where}: the node was not provisioned by "
                "gpufleet (node checks that need it are skipped)",
            )
        )
    else:
        out.append(Record(name=MANIFEST, status="pass", value=where, message=f"{where} readable"))

    py = (facts.manifest or {}).get("env_python")
    if not isinstance(py, str) or not py:
        out.append(Record(name=ENV_PYTHON, status="skip", message="the manifest names no env"))
    elif runnable(py):
        out.append(Record(name=ENV_PYTHON, status="pass", value=py, message=f"{py} runs"))
    else:
        out.append(
            Record(
                name=ENV_PYTHON,
                status="fail",
                value=py,
                threshold="an executable file",
                message=f"the training env's python {py} (manifest env_python) is missing or "
                "not executable: jobs on this node cannot start. Fix: make provision",
                remedy="make provision (reinstalls the env)",
            )
        )

    if facts.env_file is None:
        out.append(Record(name=NCCL_ENV, status="skip", message="no nccl.env on this node"))
    else:
        problems = netprobe.ifname_problems(facts.env, facts.interfaces)
        out.append(
            Record(
                name=NCCL_ENV,
                status="fail" if problems else "pass",
                value="; ".join(problems) or "ok",
                threshold="every named interface exists",
                message=(
                    "; ".join(problems) + f". Fix: correct {facts.env_file} "
                    "(cluster_network_interface, then make provision)"
                )
                if problems
                else f"every interface named in {facts.env_file} exists",
                remedy=f"fix {facts.env_file} (make provision)" if problems else "",
            )
        )
    return out


def gpu_records(
    reading: NodeReading | None,
    error: NvmlUnavailable | None,
    *,
    require_gpu: bool,
    expected_gpus: int | None,
    min_driver: str | None,
    pci_gpus: int | None,
    platform: fabric.PlatformFacts | None,
) -> list[Record]:
    """Driver, count, per-GPU memory and link health, fabric state (no torch)."""
    if reading is None:
        assert error is not None
        return [health.no_driver(health.DRIVER_LOADED, error, require_gpu)]
    out = [
        health.driver_loaded(reading),
        health.driver_version(reading, min_driver),
    ]
    if reading.gpus or require_gpu or expected_gpus is not None:
        out.append(health.gpu_count(reading, expected_gpus, pci_gpus))
    per_gpu: Sequence[Callable[..., Record]] = (
        health.persistence_mode,
        health.ecc_uncorrectable,
        health.page_retirement,
        health.row_remap,
        health.nvlink,
    )
    for gpu in reading.gpus:
        lost = health.gpu_unreadable("gpu_readable", gpu)
        if lost is not None:
            out.append(lost)
            continue
        out.extend(check(gpu) for check in per_gpu)
    if platform is not None and fabric.not_nvswitch(fabric.GPU_FABRIC_STATE, platform) is None:
        out.append(fabric.gpu_fabric_state(platform, reading))
    return out


def xid_record(
    lines: list[str], source: str, now: datetime, window_h: float, reading: NodeReading | None
) -> Record:
    events = xid.recent(xid.parse(lines), now, window_h)
    return health.xid_errors(events, () if reading is None else reading.gpus, window_h, now, source)


def run_checks(
    *,
    manifest_path: Path = DEFAULT_MANIFEST,
    recording: dict[str, Any] | None = None,
    require_gpu: bool | None = None,
    expected_gpus: int | None = None,
    xid_window_h: float = xid.DEFAULT_WINDOW_HOURS,
    reader: NvmlReader | None = None,
) -> list[Record]:
    """Every fast check on this node (real NVML, or a recording), in check order."""
    facts = read_node_facts(manifest_path)
    records = node_records(facts)
    manifest = facts.manifest
    plan = (manifest or {}).get("plan")
    min_driver = plan.get("min_driver") if isinstance(plan, dict) else None
    require = require_gpu_from(manifest, require_gpu)
    if reader is None:
        from gpufleet.node.nvml import PynvmlReader  # noqa: PLC0415 - needs nvidia-ml-py

        reader = RecordedReader(recording) if recording is not None else PynvmlReader()
    reading: NodeReading | None = None
    error: NvmlUnavailable | None = None
    try:
        reading = reader.read()
    except NvmlUnavailable as exc:
        error = exc
    platform: fabric.PlatformFacts | None
    if recording is not None:
        pci = recording.get("pci_nvidia_gpus")
        pci_gpus = None if pci is None else int(pci)
        platform = fabric.PlatformFacts.from_recording(recording)
    else:
        pci_gpus = nodefacts.pci_nvidia_gpus()
        platform = fabric.read_platform() if reading is not None and reading.gpus else None
    records += gpu_records(
        reading,
        error,
        require_gpu=require,
        expected_gpus=expected_gpus_from(manifest, expected_gpus),
        min_driver=min_driver if isinstance(min_driver, str) else None,
        pci_gpus=pci_gpus,
        platform=platform,
    )
    try:
        if recording is not None and "kernel_log" in recording:
            at = recording.get("recorded_at")
            now = (
                datetime.fromisoformat(at.replace("Z", "+00:00"))
                if at
                else datetime.now(timezone.utc)
            )
            lines, source = list(recording["kernel_log"]), "recording"
        else:
            now = datetime.now(timezone.utc)
            lines, source = xid.read_kernel_log(xid_window_h)
        records.append(xid_record(lines, source, now, xid_window_h, reading))
    except (xid.KernelLogUnavailable, OSError) as exc:
        records.append(health.kernel_log_unreadable(exc))
    close = getattr(reader, "close", None)
    if callable(close):
        close()
    return records


def first_failures(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.status == "fail"]
