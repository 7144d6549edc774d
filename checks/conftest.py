"""gpufleet node checks: options, the node context, per-GPU parametrisation, and the
plugin that turns every test into a ``gpufleet.results.Record`` (JSON envelope kind
"checks") plus a compact summary. JUnit XML comes from pytest's ``--junitxml``.

Run on a node::

    python -m pytest checks/ -p no:cacheprovider \
        --gpufleet-json=out/checks.json --junitxml=out/checks.xml

See docs/checks.md for every option.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import pytest

import gpufleet
from gpufleet.commands.cmd_health import add_node_options, add_suite_options
from gpufleet.node import facts as nodefacts
from gpufleet.node import health, xid
from gpufleet.node import nvswitch as fabric
from gpufleet.node.nvml import (
    GpuReading,
    NodeReading,
    NvmlReader,
    NvmlUnavailable,
    PynvmlReader,
    RecordedReader,
    load_recording,
)
from gpufleet.results import Record, ResultFile, Status

DEFAULT_MANIFEST = Path("/etc/gpufleet/manifest.json")
#: Seconds of matmul + host-to-device copies used to wake an idle PCIe link before
#: re-reading it (a second, longer try when the first leaves the link low).
PCIE_LOAD_SECONDS = (0.2, 1.0)
TRUTHY = {"1", "true", "yes", "on"}


# ------------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options gpufleet health shares (gpufleet.commands.cmd_health), plus the suite's own."""
    g = parser.getgroup("gpufleet", "gpufleet node checks")
    g.addoption(
        "--gpufleet-manifest",
        metavar="PATH",
        help=f"node manifest (default: {DEFAULT_MANIFEST} if present)",
    )
    g.addoption("--gpufleet-json", metavar="PATH", help="write the JSON result envelope here")
    add_node_options(g.addoption)
    add_suite_options(g.addoption)


# ------------------------------------------------------------------------------- context


@dataclass
class Ctx:
    """Everything the checks read, gathered once per session."""

    config: pytest.Config
    node: str
    manifest: dict[str, Any]
    manifest_path: str | None
    require_gpu: bool
    require_gpu_source: str
    recording: dict[str, Any] | None
    reader: NvmlReader
    reading: NodeReading | None = None
    nvml_error: NvmlUnavailable | None = None
    started: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)
    _torch: nodefacts.TorchFacts | None = None
    _under_load: dict[int, GpuReading] | None = None
    _platform: fabric.PlatformFacts | None = None

    # -- plan values (options override the manifest)
    @property
    def plan(self) -> dict[str, Any]:
        plan = self.manifest.get("plan")
        return plan if isinstance(plan, dict) else {}

    def opt(self, name: str) -> Any:
        return self.config.getoption(name)

    @property
    def min_driver(self) -> str | None:
        return self.opt("min_driver") or self.plan.get("min_driver")

    @property
    def wheel_variant(self) -> str | None:
        return self.opt("wheel_variant") or self.manifest.get("env_wheel_variant")

    @property
    def plan_cuda(self) -> str | None:
        return self.opt("expect_cuda") or self.plan.get("cuda")

    @property
    def plan_nccl(self) -> str | None:
        return self.opt("expect_nccl") or self.plan.get("nccl")

    @property
    def plan_toolkit(self) -> str | None:
        return self.opt("expect_toolkit") or health.toolkit_from_plan(self.plan)

    @property
    def expected_gpus(self) -> int | None:
        opt = self.opt("expected_gpus")
        if opt is not None:
            return int(opt)
        raw = self.manifest.get("gpus_expected")  # an int; null, 0 or "all" mean all
        if isinstance(raw, str) and raw.strip().isdigit():
            raw = int(raw)
        return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else None

    # -- facts (a recording replays every one; absent sections mean "not present")
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
        """(lines, source, now). Raises xid.KernelLogUnavailable."""
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
        lines, source = xid.read_kernel_log(float(self.opt("xid_window_hours")))
        return lines, source, datetime.now(timezone.utc)

    def under_load(self, gpu: GpuReading) -> GpuReading | None:
        """``gpu`` re-read while busy, or None when it cannot be loaded here."""
        if isinstance(self.reader, RecordedReader):
            if not self.reader.has_after_load(gpu.index):
                return None
            return self.reader.reread_gpu(gpu.index)
        if self.opt("no_pcie_load") or self.reading is None:
            return None
        if self._under_load is None:
            idle = [g for g in self.reading.gpus if _idle_downshifted(g)]
            self._under_load = _busy_reread_all(self, idle)
        return self._under_load.get(gpu.index)


def _idle_downshifted(gpu: GpuReading) -> bool:
    first = health.pcie_link(gpu)
    return first.status == "warn" and "idle downshift" in first.message


def _busy_reread_all(ctx: Ctx, gpus: list[GpuReading]) -> dict[int, GpuReading]:
    """Load these GPUs together with torch and re-read NVML while their queues are busy.

    All GPUs are loaded at once (one short load per node, not per GPU). GPUs still below
    max after the first load get a second, longer one, so a slow upshift is not a fault.
    Returns the re-reads by NVML index; GPUs torch cannot reach are left out.
    """
    tf = ctx.torch()
    targets = {
        g.index: i for g in gpus if (i := nodefacts.torch_index_for(g.pci_bus_id, tf)) is not None
    }
    readings: dict[int, GpuReading] = {}
    if not targets:
        return readings
    try:
        import torch  # noqa: PLC0415

        work = {}
        for index, tidx in targets.items():
            dev = torch.device("cuda", tidx)
            work[index] = (
                dev,
                torch.randn(2048, 2048, device=dev),
                torch.empty(16 << 20, dtype=torch.uint8).pin_memory(),
            )
        pending = set(targets)
        for seconds in PCIE_LOAD_SECONDS:
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                for index in pending:
                    dev, a, host = work[index]
                    _ = a @ a
                    _ = host.to(dev, non_blocking=True)
            for index in pending:  # read while the queues are still busy
                readings[index] = ctx.reader.reread_gpu(index)
            for index in pending:
                torch.cuda.synchronize(work[index][0])
            pending = {
                i for i in pending
                if readings[i].error is None
                and readings[i].pcie_gen_current != readings[i].pcie_gen_max
            }  # fmt: skip
            if not pending:
                break
        ctx.meta["pcie_load_rechecks"] = [g.label for g in gpus if g.index in readings]
    except Exception as exc:  # a failing load must not crash the PCIe check
        ctx.meta.setdefault("pcie_load_errors", []).append(str(exc))
    return readings


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in TRUTHY


def _build_ctx(config: pytest.Config) -> Ctx:
    manifest_opt = config.getoption("gpufleet_manifest")
    manifest_path: Path | None
    if manifest_opt:
        manifest_path = Path(manifest_opt)
        if not manifest_path.is_file():
            raise pytest.UsageError(f"--gpufleet-manifest {manifest_path}: no such file")
    else:
        manifest_path = DEFAULT_MANIFEST if DEFAULT_MANIFEST.is_file() else None
    manifest: dict[str, Any] = {}
    if manifest_path is not None:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))

    opt = config.getoption("require_gpu")
    if opt is not None:
        require, source = bool(opt), "option"
    elif manifest.get("require_gpu") is not None:
        raw = manifest["require_gpu"]  # a templated manifest may carry "true"/"False"
        require, source = (raw if isinstance(raw, bool) else _truthy(raw)), "manifest"
    elif os.environ.get("GPUFLEET_REQUIRE_GPU", "") != "":
        require, source = _truthy(os.environ["GPUFLEET_REQUIRE_GPU"]), "env"
    else:
        require, source = False, "default"

    rec_path = config.getoption("nvml_recording")
    recording = load_recording(rec_path) if rec_path else None
    reader: NvmlReader = RecordedReader(recording) if recording is not None else PynvmlReader()
    node = (
        config.getoption("node")
        or manifest.get("node")
        or (recording or {}).get("node")
        or socket.gethostname().split(".")[0]
    )
    ctx = Ctx(
        config=config,
        node=str(node),
        manifest=manifest,
        manifest_path=None if manifest_path is None else str(manifest_path),
        require_gpu=require,
        require_gpu_source=source,
        recording=recording,
        reader=reader,
    )
    try:
        ctx.reading = reader.read()
    except NvmlUnavailable as exc:
        ctx.nvml_error = exc
    ctx.meta.update(
        manifest=ctx.manifest_path,
        require_gpu=require,
        require_gpu_source=source,
        nvml_recording=rec_path,
        driver=None if ctx.reading is None else ctx.reading.driver_version,
        cuda_driver=None if ctx.reading is None else ctx.reading.cuda_driver_version_str,
        gpus=None if ctx.reading is None else len(ctx.reading.gpus),
        nvml_error=None if ctx.nvml_error is None else str(ctx.nvml_error),
        gpufleet=gpufleet.__version__,
        inventory=[]
        if ctx.reading is None
        else [
            {"gpu": g.label, "name": g.name, "uuid": g.uuid, "error": g.error}
            for g in ctx.reading.gpus
        ],
    )
    return ctx


CTX_KEY = pytest.StashKey[Ctx]()
RESULTS_KEY = pytest.StashKey[dict[str, Record]]()
RECORD_KEY = pytest.StashKey[Record]()
PENDING_KEY = pytest.StashKey[Record]()


def get_ctx(config: pytest.Config) -> Ctx:
    if CTX_KEY not in config.stash:
        config.stash[CTX_KEY] = _build_ctx(config)
    return config.stash[CTX_KEY]


def pytest_configure(config: pytest.Config) -> None:
    config.stash[RESULTS_KEY] = {}
    # refuse bad input before collecting (exit 4, no reports): a missing or unreadable
    # manifest or recording must not turn into a run that quietly checks nothing
    for option in ("gpufleet_manifest", "nvml_recording"):
        raw = config.getoption(option)
        if raw:
            flag = "--" + option.replace("_", "-")
            try:
                data = json.loads(Path(raw).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise pytest.UsageError(f"{flag} {raw}: {exc}") from exc
            if not isinstance(data, dict):
                raise pytest.UsageError(f"{flag} {raw}: not a JSON object")


def pytest_unconfigure(config: pytest.Config) -> None:
    ctx = config.stash.get(CTX_KEY, None)
    if ctx is not None and isinstance(ctx.reader, PynvmlReader):
        ctx.reader.close()


# ------------------------------------------------------------------------------- fixtures


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpu" not in metafunc.fixturenames:
        return
    ctx = get_ctx(metafunc.config)
    gpus = [] if ctx.reading is None else list(ctx.reading.gpus)
    if gpus:
        ids = [f"gpu{g.index}" for g in gpus]
        metafunc.parametrize("gpu", [g.index for g in gpus], ids=ids, indirect=True)
    else:
        metafunc.parametrize(
            "gpu", [None], ids=["no-driver" if ctx.nvml_error else "no-gpu"], indirect=True
        )


def check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", None) or item.name
    return name.removeprefix("test_")


class Emitter:
    """Ends a check with its Record: fail → pytest.fail, skip → pytest.skip."""

    def __init__(self, item: pytest.Item, ctx: Ctx) -> None:
        self.item = item
        self.ctx = ctx

    def __call__(self, record: Record) -> None:
        record = dataclasses.replace(record, node=self.ctx.node)
        self.item.stash[RECORD_KEY] = record
        self.item.user_properties.append(("gpufleet_status", record.status))
        if record.status != "pass":
            self.item.user_properties.append(("gpufleet_message", record.message))
        if record.status == "fail":
            pytest.fail(record.message, pytrace=False)
        if record.status == "skip":
            pytest.skip(record.message)
        if record.status == "incomplete":  # JUnit has no such state: a skip that says so
            pytest.skip(f"incomplete: {record.message}")

    def no_driver_or_no_gpu(self, *, defer: bool = False) -> None:
        """End the check for lack of a driver or GPU: skip, or fail when GPUs are required.

        Called from a fixture, a failure is deferred to the call phase (pytest_runtest_call)
        so that JUnit reports a failure, not a setup error.
        """
        name = check_name(self.item)
        if self.ctx.nvml_error is not None:
            record = health.no_driver(name, self.ctx.nvml_error, self.ctx.require_gpu)
        else:
            record = health.no_gpus(name, self.ctx.require_gpu)
        if record.status == "fail" and defer:
            self.item.stash[PENDING_KEY] = record
            return
        self(record)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    pending = item.stash.get(PENDING_KEY, None)
    if pending is not None:
        ctx = get_ctx(item.config)
        Emitter(item, ctx)(pending)


@pytest.fixture(scope="session")
def ctx(pytestconfig: pytest.Config) -> Ctx:
    return get_ctx(pytestconfig)


@pytest.fixture
def emit(request: pytest.FixtureRequest, ctx: Ctx) -> Emitter:
    return Emitter(request.node, ctx)


@pytest.fixture
def node_reading(ctx: Ctx, emit: Emitter) -> NodeReading:
    """The NVML snapshot; ends the check (skip or fail per require_gpu) without a driver."""
    if ctx.reading is None:
        emit.no_driver_or_no_gpu(defer=True)  # skips, or fails in the call phase
        return cast(NodeReading, None)
    return ctx.reading


@pytest.fixture
def gpu(request: pytest.FixtureRequest, ctx: Ctx, emit: Emitter) -> GpuReading:
    """One GPU's reading (parametrised gpu0, gpu1, ...)."""
    index = request.param
    if index is None or ctx.reading is None:
        emit.no_driver_or_no_gpu(defer=True)  # skips, or fails in the call phase
        return cast(GpuReading, None)
    return next(g for g in ctx.reading.gpus if g.index == index)


@pytest.fixture
def torch_facts(ctx: Ctx) -> nodefacts.TorchFacts:
    return ctx.torch()


# ------------------------------------------------------------------------------- reporting


def _gpu_label(item: pytest.Item, ctx: Ctx | None) -> str | None:
    callspec: Any = getattr(item, "callspec", None)
    index = None if callspec is None else callspec.params.get("gpu")
    if index is None or ctx is None or ctx.reading is None:
        return None
    return next((g.label for g in ctx.reading.gpus if g.index == index), None)


def _skip_reason(rep: pytest.TestReport) -> str:
    lr = rep.longrepr
    if isinstance(lr, tuple) and len(lr) == 3:
        return str(lr[2]).removeprefix("Skipped: ")
    return str(lr)


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works with any pytest >= 7
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    rep: pytest.TestReport = outcome.get_result()
    results = item.config.stash[RESULTS_KEY]
    ctx = item.config.stash.get(CTX_KEY, None)
    node = "" if ctx is None else ctx.node
    record = item.stash.get(RECORD_KEY, None)
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        if record is None or (rep.failed and record.status != "fail"):
            status: Status = "fail" if rep.failed else "skip" if rep.skipped else "pass"
            message = _skip_reason(rep) if rep.skipped else rep.longreprtext[-2000:]
            if rep.failed and rep.when == "setup":
                message = f"error in setup: {message}"
            record = Record(
                name=check_name(item),
                status=status,
                node=node,
                message=message,
                gpu=_gpu_label(item, ctx),
            )
        results[item.nodeid] = record
    elif rep.when == "teardown" and rep.failed:
        results[item.nodeid] = Record(
            name=check_name(item),
            status="fail",
            node=node,
            message=f"error in teardown: {rep.longreprtext[-2000:]}",
            gpu=_gpu_label(item, ctx),
        )


def _records(config: pytest.Config) -> list[Record]:
    return list(config.stash[RESULTS_KEY].values())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    path = config.getoption("gpufleet_json")
    if not path:
        return
    ctx = config.stash.get(CTX_KEY, None)
    started = time.time() if ctx is None else ctx.started
    has_gpus = ctx is not None and ctx.reading is not None and bool(ctx.reading.gpus)
    result = ResultFile(
        kind="checks",
        node="" if ctx is None else ctx.node,
        mode="gpu" if has_gpus else "cpu",
        started=datetime.fromtimestamp(started, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        duration_s=time.time() - started,
        records=_records(config),
        meta={**({} if ctx is None else ctx.meta), "pytest_exitstatus": int(exitstatus)},
    )
    result.write(path)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    records = _records(config)
    if not records:
        return
    ctx = config.stash.get(CTX_KEY, None)
    write: Callable[..., None] = terminalreporter.write_line
    counts = {s: sum(r.status == s for r in records) for s in ("pass", "warn", "fail", "skip")}
    if any(r.status == "incomplete" for r in records):
        counts["incomplete"] = sum(r.status == "incomplete" for r in records)
    head = "gpufleet checks"
    if ctx is not None:
        if ctx.reading is not None:
            drv = f"driver {ctx.reading.driver_version}, {len(ctx.reading.gpus)} GPU(s)"
        else:
            drv = str(ctx.nvml_error)
        req = f"require_gpu={ctx.require_gpu} from {ctx.require_gpu_source}"
        head += f" on {ctx.node} ({drv}; {req})"
    terminalreporter.section("gpufleet summary", sep="-")
    write(f"{head}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    for status in ("fail", "incomplete", "warn"):
        for r in records:
            if r.status == status:
                write(f"  {status.upper()} {r.name}: {r.message}")
    skips: dict[str, list[str]] = {}
    for r in records:
        if r.status == "skip":
            reason = r.message
            if r.gpu and reason.startswith("GPU "):
                reason = reason.split(": ", 1)[1]
            skips.setdefault(reason, []).append(r.name)
    for reason, names in skips.items():
        uniq = list(dict.fromkeys(names))
        more = "..." if len(uniq) > 6 else ""
        write(f"  SKIP x{len(names)} ({', '.join(uniq[:6])}{more}): {reason}")
    json_path = config.getoption("gpufleet_json")
    if json_path:
        write(f"  JSON: {json_path}")
