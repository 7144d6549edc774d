"""What the node checks read, gathered once per run: the options, the manifest, NVML (real or a
recording) and the node facts behind them. Both front ends build one :class:`NodeContext`:
``gpufleet health`` (gpufleet.node.fast_checks) and the checks suite (checks/conftest.py); the
registry's judges (gpufleet.node.health.check_registry) read nothing else.

Facts are read lazily and kept: a recording replays every one (an absent section means "not
present"), except ``torch``, which without a section is the real torch."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from gpufleet.errors import GpufleetError
from gpufleet.node import facts as nodefacts
from gpufleet.node import netprobe, profiles, xid
from gpufleet.node import nvswitch as fabric
from gpufleet.node.health.pcie_load import idle_downshifted, reread_under_load
from gpufleet.node.health.provisioned import NodeFacts
from gpufleet.node.health.pytorch import toolkit_from_plan
from gpufleet.node.nvml import GpuReading, NodeReading, NvmlReader, NvmlUnavailable, RecordedReader
from gpufleet.planning import network as netcfg

DEFAULT_MANIFEST = Path("/etc/gpufleet/manifest.json")
DEFAULT_ENV_FILE = Path("/etc/gpufleet/nccl.env")
TRUTHY = {"1", "true", "yes", "on"}


def truthy(value: object) -> bool:
    return str(value).strip().lower() in TRUTHY


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


def require_gpu_from(manifest: Mapping[str, Any] | None, option: bool | None) -> tuple[bool, str]:
    """(require_gpu, where it came from): the option, else the manifest (a templated manifest
    may carry "true"/"False"), else env GPUFLEET_REQUIRE_GPU, else false."""
    if option is not None:
        return bool(option), "option"
    raw = (manifest or {}).get("require_gpu")
    if raw is not None:
        return (raw if isinstance(raw, bool) else truthy(raw)), "manifest"
    env = os.environ.get("GPUFLEET_REQUIRE_GPU", "")
    if env != "":
        return truthy(env), "env"
    return False, "default"


def expected_gpus_from(manifest: Mapping[str, Any] | None, option: int | None) -> int | None:
    """The option, else manifest gpus_expected (an int > 0; null, 0 or "all" mean all)."""
    if option is not None:
        return int(option)
    raw = (manifest or {}).get("gpus_expected")
    if isinstance(raw, str) and raw.strip().isdigit():
        raw = int(raw)
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None


@dataclass
class NodeContext:
    """Everything the checks read. ``options`` maps option destinations (the names
    gpufleet.commands.cmd_health declares) to values; an option a front end lacks reads None."""

    options: Mapping[str, Any]
    manifest: dict[str, Any]
    manifest_path: Path | None
    reader: NvmlReader
    recording: dict[str, Any] | None = None
    manifest_found: bool = False  # manifest_path exists (it may still be unreadable)
    manifest_error: str = ""  # the manifest exists but cannot be read
    node: str = ""
    reading: NodeReading | None = None
    nvml_error: NvmlUnavailable | None = None
    started: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    _torch: nodefacts.TorchFacts | None = None
    _under_load: dict[int, GpuReading] | None = None
    _platform: fabric.PlatformFacts | None = None
    _profile: profiles.Profile | GpufleetError | None = None

    @classmethod
    def open(
        cls,
        options: Mapping[str, Any],
        manifest_path: Path | None,
        reader: NvmlReader,
        recording: dict[str, Any] | None = None,
    ) -> NodeContext:
        """Read the manifest (when there is one) and NVML once."""
        manifest, error = (None, "") if manifest_path is None else read_manifest(manifest_path)
        ctx = cls(
            options=options,
            manifest=manifest or {},
            manifest_path=manifest_path,
            manifest_found=manifest is not None or bool(error),
            manifest_error=error,
            reader=reader,
            recording=recording,
        )
        ctx.node = str(
            ctx.opt("node")
            or ctx.manifest.get("node")
            or (recording or {}).get("node")
            or socket.gethostname().split(".")[0]
        )
        try:
            ctx.reading = reader.read()
        except NvmlUnavailable as exc:
            ctx.nvml_error = exc
        return ctx

    def opt(self, name: str) -> Any:
        return self.options.get(name)

    def _opt_or(self, name: str, fallback: Any) -> str | None:
        """The option when given, else the manifest's value."""
        return cast("str | None", self.opt(name) or fallback)

    # -- plan values (options override the manifest)
    @property
    def plan(self) -> dict[str, Any]:
        plan = self.manifest.get("plan")
        return plan if isinstance(plan, dict) else {}

    @property
    def min_driver(self) -> str | None:
        return self._opt_or("min_driver", self.plan.get("min_driver"))

    @property
    def wheel_variant(self) -> str | None:
        return self._opt_or("wheel_variant", self.manifest.get("env_wheel_variant"))

    @property
    def plan_cuda(self) -> str | None:
        return self._opt_or("expect_cuda", self.plan.get("cuda"))

    @property
    def plan_nccl(self) -> str | None:
        return self._opt_or("expect_nccl", self.plan.get("nccl"))

    @property
    def plan_toolkit(self) -> str | None:
        return self._opt_or("expect_toolkit", toolkit_from_plan(self.plan))

    @property
    def require_gpu_and_source(self) -> tuple[bool, str]:
        return require_gpu_from(self.manifest, self.opt("require_gpu"))

    @property
    def require_gpu(self) -> bool:
        return self.require_gpu_and_source[0]

    @property
    def expected_gpus(self) -> int | None:
        return expected_gpus_from(self.manifest, self.opt("expected_gpus"))

    @property
    def system_profile(self) -> str:
        """The profile this node is judged against (``--system-profile``, the host's
        gpufleet_system_profile), default ``auto``: detected (gpufleet.node.profiles)."""
        return str(self.opt("system_profile") or "auto").strip() or "auto"

    @property
    def xid_window_hours(self) -> float:
        window = self.opt("xid_window_hours")
        return xid.DEFAULT_WINDOW_HOURS if window is None else float(window)

    # -- facts
    def torch(self) -> nodefacts.TorchFacts:
        if self._torch is None:
            rec = self.recording
            if rec is not None and "torch" in rec:
                self._torch = nodefacts.TorchFacts.from_dict(rec["torch"])
            else:
                self._torch = nodefacts.read_torch_facts()
            self.meta["torch"] = self._torch.version
        return self._torch

    def platform(self) -> fabric.PlatformFacts:
        """NVSwitches, Fabric Manager, IB ports, virtualisation (gpufleet.node.nvswitch)."""
        if self._platform is None:
            rec = self.recording
            self._platform = (
                fabric.PlatformFacts.from_recording(rec)
                if rec is not None
                else fabric.read_platform()
            )
        return self._platform

    def profile_choice(self, snapshot: NodeReading) -> profiles.Profile | GpufleetError:
        """The node's system profile (``system_profile``: a name or ``auto``) for ``snapshot``,
        chosen once for the checks that read it (profile, host_device_copy), or why none
        could be: an unknown name, a node auto cannot place, a bad profile file."""
        if self._profile is None:
            try:
                loaded = profiles.load_profiles(site_dir=self.opt("profiles_dir") or None)
                self._profile = profiles.select(
                    self.system_profile, snapshot, loaded, self.pci_gpus()
                )
            except GpufleetError as exc:
                self._profile = exc
        return self._profile

    def infiniband(self) -> Mapping[str, Mapping[str, Mapping[str, str]]] | None:
        """The HCA ports as read (/sys/class/infiniband, or the recording's section); None
        when they were not read: a recording without an ``infiniband`` section."""
        if self.recording is not None and "infiniband" not in self.recording:
            return None
        return self.platform().infiniband

    def modules(self) -> tuple[str, ...]:
        if self.recording is not None:
            return tuple(self.recording.get("proc_modules", ()))
        return nodefacts.loaded_modules()

    def pci_gpus(self) -> int | None:
        if self.recording is not None:
            value = self.recording.get("pci_nvidia_gpus")
            return None if value is None else int(value)
        return nodefacts.pci_nvidia_gpus()

    def visible(self) -> list[str] | None:
        if self.recording is not None and "cuda_visible_devices" in self.recording:
            raw = self.recording["cuda_visible_devices"]
            return nodefacts.visible_devices({} if raw is None else {"CUDA_VISIBLE_DEVICES": raw})
        return nodefacts.visible_devices()

    def nvcc(self) -> tuple[str | None, str | None]:
        if self.recording is not None:
            nv = self.recording.get("nvcc")
            return (None, None) if not nv else (str(nv["path"]), nv.get("release"))
        path = nodefacts.nvcc_path(self.plan.get("toolkit_prefix"))
        if path is None:
            return None, None
        return str(path), nodefacts.nvcc_release(path)

    def kernel_log(self) -> tuple[list[str], str, datetime]:
        """(lines, source, now); the Xid window is measured from a recording's recorded_at.
        Raises xid.KernelLogUnavailable or OSError."""
        if self.recording is not None and "kernel_log" in self.recording:
            recorded = self.recording.get("recorded_at")
            now = (
                datetime.fromisoformat(recorded.replace("Z", "+00:00"))
                if recorded
                else datetime.now(timezone.utc)
            )
            return list(self.recording["kernel_log"]), "recording", now
        path = self.opt("kernel_log")
        if path:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            return text.splitlines(), path, datetime.now(timezone.utc)
        lines, source = xid.read_kernel_log(self.xid_window_hours)
        return lines, source, datetime.now(timezone.utc)

    def provisioned(self) -> NodeFacts:
        """The manifest as gpufleet provisioned it, its nccl.env and this node's interfaces."""
        raw_env = self.manifest.get("env_file")
        env_file = Path(raw_env) if isinstance(raw_env, str) and raw_env else DEFAULT_ENV_FILE
        present = env_file.is_file()
        return NodeFacts(
            manifest_path=self.manifest_path or DEFAULT_MANIFEST,
            manifest=self.manifest if self.manifest_found and not self.manifest_error else None,
            manifest_error=self.manifest_error,
            env=netcfg.read_env_file(str(env_file)) if present else {},
            env_file=env_file if present else None,
            interfaces=netprobe.node_interfaces(),
        )

    def under_load(self, gpu: GpuReading) -> GpuReading | None:
        """``gpu`` re-read while busy, or None when it cannot be loaded here."""
        if isinstance(self.reader, RecordedReader):
            if not self.reader.has_after_load(gpu.index):
                return None
            return self.reader.reread_gpu(gpu.index)
        if self.opt("no_pcie_load") or self.reading is None:
            return None
        if self._under_load is None:
            idle = [g for g in self.reading.gpus if idle_downshifted(g)]
            self._under_load = reread_under_load(self.reader, self.torch(), idle, self.meta)
        return self._under_load.get(gpu.index)

    def close(self) -> None:
        close = getattr(self.reader, "close", None)
        if callable(close):
            close()
