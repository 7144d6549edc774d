"""The node checks, declared once: for each its record name, its tiers, its scope and the judge
that turns the node's readings (a :class:`~gpufleet.node.health.context.NodeContext`) into its
record. ``gpufleet health`` (gpufleet.node.fast_checks) runs the ``health`` tier; the checks suite
(checks/, ``make check`` and ``make verify``) generates one pytest test per ``verify`` entry,
``test_<name>`` in ``checks/test_<family>.py``, per GPU for a ``gpu`` check.

Tiers: ``health``, the fast path of a scheduler's HealthCheckProgram (no torch, every few
minutes); ``verify``, the checks suite. The order of :data:`CHECKS` is the order of both: the
suite's tests within one file, and ``gpufleet health``'s records (a drain reason names the first
failure), where a ``gpu`` check runs GPU by GPU in one block at the place of the first.

A judge returns None when the node has no GPU for it to judge: the suite then records the
no-driver / no-GPU verdict (skip, or fail when require_gpu), ``gpufleet health`` leaves the
check out. docs/checks.md, "Adding a check", lists what a new check touches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from gpufleet.errors import GpufleetError
from gpufleet.node import facts as nodefacts
from gpufleet.node import ib_ports as ibports
from gpufleet.node import nvswitch as fabric
from gpufleet.node import platform_checks as platform
from gpufleet.node import profiles, xid
from gpufleet.node.health import (
    _common,
    driver,
    host_copy,
    host_copy_bench,
    kernel_log,
    links,
    memory,
    names,
    provisioned,
)
from gpufleet.node.health import pytorch as torchchecks
from gpufleet.node.health import system_profile as sysprofile
from gpufleet.node.health.context import NodeContext
from gpufleet.node.health.pcie_load import idle_downshifted
from gpufleet.node.nvml import GpuReading, NodeReading
from gpufleet.results import Record

Tier = Literal["health", "verify"]
Scope = Literal["node", "gpu"]
Judge = Callable[[NodeContext, GpuReading | None], Record | None]
HEALTH: frozenset[Tier] = frozenset({"health"})
VERIFY: frozenset[Tier] = frozenset({"verify"})
BOTH: frozenset[Tier] = frozenset({"health", "verify"})


@dataclass(frozen=True)
class NodeCheck:
    """One node check. ``needs_driver``: without NVML the check's record is the no-driver
    verdict (every ``gpu`` check needs it). ``applies``: whether ``gpufleet health`` judges the
    check on this node at all (the suite records the judge's own skip instead)."""

    name: str
    family: str  # checks/test_<family>.py for a verify check
    tiers: frozenset[Tier]
    judge: Judge
    scope: Scope = "node"
    needs_driver: bool = False
    applies: Callable[[NodeContext], bool] | None = None

    @property
    def test_name(self) -> str:
        return f"test_{self.name}"

    @property
    def driver_needed(self) -> bool:
        return self.needs_driver or self.scope == "gpu"


def _per_gpu(verdict: Callable[[GpuReading], Record]) -> Judge:
    def judge(ctx: NodeContext, gpu: GpuReading | None) -> Record | None:
        return None if gpu is None else verdict(gpu)

    return judge


# ------------------------------------------------------------------------------ judges


def _manifest(ctx: NodeContext, _: GpuReading | None) -> Record:
    return provisioned.manifest(ctx.provisioned())


def _env_python(ctx: NodeContext, _: GpuReading | None) -> Record:
    return provisioned.env_python(ctx.provisioned())


def _nccl_env(ctx: NodeContext, _: GpuReading | None) -> Record:
    return provisioned.nccl_env_interfaces(ctx.provisioned())


def _driver_loaded(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    return None if ctx.reading is None else driver.driver_loaded(ctx.reading)


def _driver_version(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    return None if ctx.reading is None else driver.driver_version(ctx.reading, ctx.min_driver)


def _cuda_driver_version(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    if ctx.reading is None:
        return None
    wheel_cuda = ctx.plan_cuda if ctx.wheel_variant != "cpu" else None
    return driver.cuda_driver_version(ctx.reading, ctx.torch().cuda or wheel_cuda)


def _nouveau(ctx: NodeContext, _: GpuReading | None) -> Record:
    return driver.nouveau(ctx.modules())


def _gpu_count(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    reading = ctx.reading
    if reading is None or (not reading.gpus and not ctx.require_gpu and ctx.expected_gpus is None):
        return None  # no GPU and none expected
    return driver.gpu_count(reading, ctx.expected_gpus, ctx.pci_gpus())


def _pcie_link(ctx: NodeContext, gpu: GpuReading | None) -> Record | None:
    if gpu is None:
        return None
    first = links.pcie_link(gpu)
    if first.status == "warn" and "idle downshift" in first.message:
        loaded = ctx.under_load(gpu)
        if loaded is not None:
            first = links.pcie_link(gpu, under_load=loaded)
    return first


def _fabric_manager(ctx: NodeContext, _: GpuReading | None) -> Record:
    return fabric.fabric_manager(ctx.platform(), ctx.reading, ctx.nvml_error)


def _gpu_fabric_state(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    platform = ctx.platform()
    if ctx.reading is None:  # nothing to check without NVSwitch, driver or not
        return fabric.not_nvswitch(fabric.GPU_FABRIC_STATE, platform)
    return fabric.gpu_fabric_state(platform, ctx.reading)


def _fabric_to_judge(ctx: NodeContext) -> bool:
    """NVSwitches to judge; a node without GPUs has its platform read only from a recording."""
    if ctx.reading is None or (not ctx.reading.gpus and ctx.recording is None):
        return False
    return fabric.not_nvswitch(fabric.GPU_FABRIC_STATE, ctx.platform()) is None


def _expected_ports(ctx: NodeContext) -> list[str] | None:
    raw = ctx.opt("ib_ports") or ctx.manifest.get("ib_ports")
    if isinstance(raw, str):
        raw = raw.split(",")
    return [str(p).strip() for p in raw if str(p).strip()] if raw else None


def _ib_ports(ctx: NodeContext, _: GpuReading | None) -> Record:
    ports = ibports.ports_from_raw(ctx.platform().infiniband)
    rate = ctx.opt("ib_min_rate") or ctx.manifest.get("ib_min_rate_gbps")
    layer = ctx.opt("ib_link_layer") or ctx.manifest.get("ib_link_layer")
    return ibports.ib_ports(ports, _expected_ports(ctx), rate and float(rate), layer or None)


def _gpudirect_rdma(ctx: NodeContext, _: GpuReading | None) -> Record:
    ports = ibports.ports_from_raw(ctx.platform().infiniband)
    gpus = len(ctx.reading.gpus) if ctx.reading is not None else ctx.pci_gpus()
    return ibports.gpudirect_rdma(ports, gpus, ctx.modules(), ctx.platform().memory_peers)


def _live_only(name: str) -> Record:
    return _common.rec(
        name,
        "skip",
        f"{name} reads this machine's PCI bus and kernel state, which an NVML recording "
        "does not hold",
    )


def _pcie_acs(ctx: NodeContext, _: GpuReading | None) -> Record:
    if ctx.recording is not None:
        return _live_only(platform.PCIE_ACS)
    return platform.pcie_acs(platform.read_acs())


def _iommu_mode(ctx: NodeContext, _: GpuReading | None) -> Record:
    if ctx.recording is not None:
        return _live_only(platform.IOMMU_MODE)
    return platform.iommu_mode(platform.read_iommu())


def profile_snapshot(ctx: NodeContext) -> NodeReading | None:
    """What the profile is judged on: NVML's reading; without a driver, no GPU when the PCI
    bus lists none (a CPU node), else None (the no-driver verdict: GPUs nobody can read)."""
    if ctx.reading is not None:
        return ctx.reading
    err = ctx.nvml_error
    if err is None or not err.no_driver or ctx.pci_gpus():
        return None
    return NodeReading(driver_version="", cuda_driver_version=None, gpus=())


def _settled(ctx: NodeContext, profile: profiles.Profile, snapshot: NodeReading) -> NodeReading:
    """``snapshot`` with each GPU idling below the profile's PCIe generation re-read under
    load where it can be (as pcie_link does, and from its cache): an idle link downshifts."""
    want = profile.pcie_generation
    if not want or ctx.reading is None:
        return snapshot
    gpus = []
    for gpu in snapshot.gpus:
        low = gpu.pcie_gen_current is not None and gpu.pcie_gen_current < want
        loaded = ctx.under_load(gpu) if low and idle_downshifted(gpu) else None
        gpus.append(gpu if loaded is None else loaded)
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


def _system_profile(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    snapshot = profile_snapshot(ctx)
    if snapshot is None:
        return None
    wanted = ctx.system_profile
    profile = ctx.profile_choice(snapshot)
    if isinstance(profile, GpufleetError):
        ctx.meta["profile"] = sysprofile.profile_meta(wanted, None, error=str(profile))
        return sysprofile.profile_unresolved(wanted, profile)
    raw_ib = ctx.infiniband()
    ports = None if raw_ib is None else ibports.ports_from_raw(raw_ib)
    findings = profiles.diff(profile, _settled(ctx, profile, snapshot), ports, node=ctx.node)
    ctx.meta["profile"] = sysprofile.profile_meta(wanted, profile, findings, ports is not None)
    return sysprofile.system_profile(profile, wanted, findings, ports is not None)


def _host_device_copy(ctx: NodeContext, gpu: GpuReading | None) -> Record | None:
    """Measure this GPU's copy bandwidth (host_copy_bench) and judge it against the profile's
    floors.host_device_copy_gbs (host_copy); a recording or a torch without CUDA: skip."""
    if gpu is None or ctx.reading is None:
        return None
    chosen = ctx.profile_choice(ctx.reading)
    profile = None if isinstance(chosen, GpufleetError) else chosen
    figure = None if profile is None else profile.floor(host_copy.FLOOR)
    floor = None if figure is None or figure.value is None else float(figure.value)
    size = int(figure.message_bytes) if figure and figure.message_bytes else host_copy.COPY_BYTES
    name = None if profile is None else profile.name

    def skip(why: str) -> Record:
        return host_copy.host_device_copy(gpu, None, floor, name, why_not=why)

    if gpu.error is not None:  # NVML cannot read it: the lost-GPU verdict, never measured
        return skip("NVML cannot read this GPU")
    if ctx.recording is not None:
        return skip("an NVML recording holds no copy figure: measured on the live machine only")
    tf = ctx.torch()
    if not tf.cuda_available:
        error = f" ({tf.error})" if tf.error else ""
        return skip(f"torch {tf.version or '(not importable)'} cannot use CUDA here{error}")
    index = nodefacts.torch_index_for(gpu.pci_bus_id, tf)
    if index is None:
        return skip("torch lists no CUDA device at this PCI bus id (CUDA_VISIBLE_DEVICES?)")
    try:
        measured = host_copy_bench.measure(index, gpu.pci_bus_id, size)
    except Exception as exc:  # a CUDA error or OOM must not crash the suite
        return host_copy.measurement_failed(gpu, f"{type(exc).__name__}: {exc}")
    ctx.meta.setdefault("host_device_copy", []).append({"gpu": gpu.label, **measured.to_dict()})
    return host_copy.host_device_copy(gpu, measured, floor, name)


def _xid_errors(ctx: NodeContext, _: GpuReading | None) -> Record:
    window = ctx.xid_window_hours
    try:
        lines, source, now = ctx.kernel_log()
    except (xid.KernelLogUnavailable, OSError) as exc:
        return kernel_log.kernel_log_unreadable(exc)
    ctx.meta["kernel_log"] = source
    events = xid.recent(xid.parse(lines), now, window)
    counts: dict[int, int] = {}
    for e in events:
        counts[e.xid] = counts.get(e.xid, 0) + 1
    ctx.meta["xid_events"] = counts  # Xid -> events in the window (gpufleet health's figures)
    gpus = () if ctx.reading is None else ctx.reading.gpus
    return kernel_log.xid_errors(events, gpus, window, now, source)


def _torch_cuda_available(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    if ctx.reading is None or not ctx.reading.gpus:
        return None
    return torchchecks.torch_cuda_available(ctx.torch(), ctx.wheel_variant)


def _torch_device_count(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    if ctx.reading is None or not ctx.reading.gpus:
        return None
    return torchchecks.torch_device_count(ctx.torch(), len(ctx.reading.gpus), ctx.visible())


def _torch_arch(ctx: NodeContext, gpu: GpuReading | None) -> Record | None:
    return None if gpu is None else torchchecks.torch_arch(gpu, ctx.torch())


def _torch_cuda_version(ctx: NodeContext, _: GpuReading | None) -> Record:
    return torchchecks.torch_cuda_version(ctx.torch(), ctx.plan_cuda, ctx.wheel_variant)


def _nccl_version(ctx: NodeContext, _: GpuReading | None) -> Record:
    return torchchecks.nccl_version(ctx.torch(), ctx.plan_nccl)


def _cuda_visible_devices(ctx: NodeContext, _: GpuReading | None) -> Record | None:
    if ctx.reading is None:
        return None
    return torchchecks.cuda_visible_devices(ctx.torch(), ctx.visible(), len(ctx.reading.gpus))


def _toolkit(ctx: NodeContext, _: GpuReading | None) -> Record:
    nvcc, release = ctx.nvcc()
    return torchchecks.toolkit(nvcc, release, ctx.plan_toolkit)


# ---------------------------------------------------------------------------- registry

GPU: Scope = "gpu"

CHECKS: tuple[NodeCheck, ...] = (
    NodeCheck(names.MANIFEST, "node", HEALTH, _manifest),
    NodeCheck(names.ENV_PYTHON, "node", HEALTH, _env_python),
    NodeCheck(names.NCCL_ENV, "node", HEALTH, _nccl_env),
    NodeCheck(names.DRIVER_LOADED, "driver", BOTH, _driver_loaded, needs_driver=True),
    NodeCheck(names.DRIVER_VERSION, "driver", BOTH, _driver_version, needs_driver=True),
    NodeCheck(names.CUDA_DRIVER_VERSION, "driver", VERIFY, _cuda_driver_version, needs_driver=True),
    NodeCheck(names.NOUVEAU, "driver", VERIFY, _nouveau),
    NodeCheck(names.GPU_COUNT, "driver", BOTH, _gpu_count, needs_driver=True),
    NodeCheck(names.PERSISTENCE, "driver", BOTH, _per_gpu(driver.persistence_mode), GPU),
    NodeCheck(names.ECC_MODE, "memory", VERIFY, _per_gpu(memory.ecc_mode), GPU),
    NodeCheck(names.ECC_UNCORRECTABLE, "memory", BOTH, _per_gpu(memory.ecc_uncorrectable), GPU),
    NodeCheck(names.PAGE_RETIREMENT, "memory", BOTH, _per_gpu(memory.page_retirement), GPU),
    NodeCheck(names.ROW_REMAP, "memory", BOTH, _per_gpu(memory.row_remap), GPU),
    NodeCheck(names.PCIE_LINK, "links", VERIFY, _pcie_link, GPU),
    NodeCheck(names.NVLINK, "links", BOTH, _per_gpu(links.nvlink), GPU),
    NodeCheck(names.CLOCK_EVENTS, "links", VERIFY, _per_gpu(links.clock_event_reasons), GPU),
    NodeCheck(fabric.FABRIC_MANAGER, "fabric", VERIFY, _fabric_manager),
    NodeCheck(fabric.GPU_FABRIC_STATE, "fabric", BOTH, _gpu_fabric_state, applies=_fabric_to_judge),
    NodeCheck(ibports.IB_PORTS, "fabric", VERIFY, _ib_ports),
    NodeCheck(ibports.GPUDIRECT_RDMA, "fabric", VERIFY, _gpudirect_rdma),
    # read the live machine only (a recording has no PCI bridges); verify tier: they change
    # only with a reboot or a BIOS setting, and ACS asks lspci once per bridge
    NodeCheck(platform.PCIE_ACS, "fabric", VERIFY, _pcie_acs),
    NodeCheck(platform.IOMMU_MODE, "fabric", VERIFY, _iommu_mode),
    # the node against its system profile (docs/profiles.md): every finding in one record
    NodeCheck(names.SYSTEM_PROFILE, "profile", VERIFY, _system_profile),
    # per GPU: host<->device copy bandwidth against the profile's floor (torch, live only)
    NodeCheck(names.HOST_DEVICE_COPY, "profile", VERIFY, _host_device_copy, GPU),
    NodeCheck(names.XID, "links", BOTH, _xid_errors),
    NodeCheck(names.TORCH_CUDA, "torch", VERIFY, _torch_cuda_available, needs_driver=True),
    NodeCheck(names.TORCH_COUNT, "torch", VERIFY, _torch_device_count, needs_driver=True),
    NodeCheck(names.TORCH_ARCH, "torch", VERIFY, _torch_arch, GPU),
    NodeCheck(names.TORCH_CUDA_VERSION, "torch", VERIFY, _torch_cuda_version),
    NodeCheck(names.NCCL_VERSION, "torch", VERIFY, _nccl_version),
    NodeCheck(names.VISIBLE_DEVICES, "torch", VERIFY, _cuda_visible_devices, needs_driver=True),
    NodeCheck(names.TOOLKIT, "torch", VERIFY, _toolkit),
)


def tier(which: Tier) -> tuple[NodeCheck, ...]:
    return tuple(c for c in CHECKS if which in c.tiers)


def suite_family(family: str) -> tuple[NodeCheck, ...]:
    """The verify checks of checks/test_<family>.py, in order."""
    return tuple(c for c in tier("verify") if c.family == family)


def no_gpu_verdict(ctx: NodeContext, name: str) -> Record:
    """The record of a check with nothing to judge: no driver, or no GPU (skip, or fail when
    require_gpu)."""
    if ctx.nvml_error is not None:
        return _common.no_driver(name, ctx.nvml_error, ctx.require_gpu)
    return _common.no_gpus(name, ctx.require_gpu)


def verdict(check: NodeCheck, ctx: NodeContext, gpu: GpuReading | None) -> Record:
    """The suite's record of ``check`` on ``gpu`` (None: the node, or no GPU to run on)."""
    if check.driver_needed and ctx.reading is None:
        return no_gpu_verdict(ctx, check.name)
    record = check.judge(ctx, gpu)
    return no_gpu_verdict(ctx, check.name) if record is None else record


def suite_records(check: NodeCheck, ctx: NodeContext) -> Iterator[Record]:
    """The records the suite gives ``check``: one per GPU (``gpu`` scope) or one."""
    gpus = () if ctx.reading is None else ctx.reading.gpus
    if check.scope == "gpu" and gpus:
        for gpu in gpus:
            yield verdict(check, ctx, gpu)
    else:
        yield verdict(check, ctx, None)


def health_records(ctx: NodeContext) -> list[Record]:
    """``gpufleet health``'s records: without a driver the first check that needs one is the
    no-driver verdict and the others are left out; a GPU NVML cannot read is one
    ``gpu_readable`` record in place of its checks; a check with nothing to judge is left out."""
    out: list[Record] = []
    gpu_block_done = no_driver_told = False
    for check in tier("health"):
        if check.driver_needed and ctx.reading is None:
            if not no_driver_told and ctx.nvml_error is not None:
                out.append(_common.no_driver(check.name, ctx.nvml_error, ctx.require_gpu))
                no_driver_told = True
            continue
        if check.scope == "gpu":
            if not gpu_block_done:
                out += _gpu_block(ctx)
                gpu_block_done = True
            continue
        if check.applies is not None and not check.applies(ctx):
            continue
        record = check.judge(ctx, None)
        if record is not None:
            out.append(record)
    return out


def _gpu_block(ctx: NodeContext) -> list[Record]:
    assert ctx.reading is not None
    checks = [c for c in tier("health") if c.scope == "gpu"]
    out: list[Record] = []
    for gpu in ctx.reading.gpus:
        lost = _common.gpu_unreadable(names.GPU_READABLE, gpu)
        if lost is not None:
            out.append(lost)
            continue
        out += [r for c in checks if (r := c.judge(ctx, gpu)) is not None]
    return out


# ------------------------------------------------------------------------- the suite's tests

Emit = Callable[[Record], None]  # checks/conftest.py's emit fixture: ends the test with a record


def suite_tests(family: str) -> dict[str, Callable[..., None]]:
    """``test_<name>`` for every verify check of ``family``, in registry order:
    checks/test_<family>.py puts them into its namespace. A ``gpu`` check's test takes the
    ``gpu`` fixture (parametrised gpu0, gpu1, ...; None without a driver or GPU)."""
    return {check.test_name: _suite_test(check) for check in suite_family(family)}


def _suite_test(check: NodeCheck) -> Callable[..., None]:
    test: Callable[..., None]
    if check.scope == "gpu":

        def per_gpu(gpu: GpuReading | None, ctx: NodeContext, emit: Emit) -> None:
            emit(verdict(check, ctx, gpu))

        test = per_gpu
    else:

        def per_node(ctx: NodeContext, emit: Emit) -> None:
            emit(verdict(check, ctx, None))

        test = per_node
    test.__name__ = test.__qualname__ = check.test_name
    test.__doc__ = f"{check.name}: a {check.scope} check (gpufleet.node.health.check_registry)"
    return test
