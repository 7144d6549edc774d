"""Thin NVML reader: typed readings per GPU, from the real library or from a recording.

The node checks (``checks/``) and ``gpufleet.node.health`` only see :class:`NodeReading` /
:class:`GpuReading`. Two readers produce them:

* :class:`PynvmlReader` over ``nvidia-ml-py`` (import name ``pynvml``; the PyPI package
  ``pynvml`` is deprecated). It converts ``pynvml.NVMLError`` by its ``.value``:
  12 library not found and 9 driver not loaded become :class:`NvmlUnavailable` with
  ``no_driver`` true; 15 (GPU is lost) on one GPU becomes that GPU's ``error``; 3
  (not supported) and 2 (invalid argument) on a counter become ``None`` for that counter.
* :class:`RecordedReader` loads the ``"nvml"`` section of a JSON recording (the format
  that ``gpufleet nvml record --output FILE`` writes on a real node), so the checks can
  be tested on machines without a GPU.

``None`` in a reading always means "this GPU or driver does not report it" (for example
ECC counters on consumer GPUs); the checks skip with that reason instead of failing.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gpufleet.errors import GpufleetError

# NVML return codes (nvml.h; nvidia-ml-py pynvml.py NVML_ERROR_*).
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18

#: Errors meaning "there is no usable NVIDIA driver on this machine" (not a broken one).
NO_DRIVER_CODES = frozenset({NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED})
#: Errors meaning "this counter / link does not exist on this GPU".
ABSENT_CODES = frozenset(
    {
        NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_INVALID_ARGUMENT,
        NVML_ERROR_NOT_FOUND,
        NVML_ERROR_FUNCTION_NOT_FOUND,
    }
)

NVML_ERROR_TEXT: Mapping[int, str] = {
    NVML_ERROR_NO_PERMISSION: "insufficient permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "NVIDIA kernel driver not loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML library libnvidia-ml.so.1 not found",
    NVML_ERROR_CORRUPTED_INFOROM: "corrupted InfoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost (fell off the bus)",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "NVML library / kernel module version mismatch",
}

#: Remedy per NVML init error (NHC check_nvsmi_healthmon maps the same codes).
NVML_ERROR_REMEDY: Mapping[int, str] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: "install the NVIDIA driver (role nvidia_driver)",
    NVML_ERROR_DRIVER_NOT_LOADED: "load the module (modprobe nvidia) or reboot into the "
    "kernel the driver was built for; check `dkms status` and nouveau blacklisting",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "the driver was upgraded without reloading the "
    "kernel module: reboot the node (or unload and reload nvidia*)",
    NVML_ERROR_NO_PERMISSION: "run as a user with access to /dev/nvidia* (in containers: "
    "SELinux container_use_devices or label=disable)",
    NVML_ERROR_GPU_IS_LOST: "GPU fell off the bus: drain the node, reset the GPU "
    "(nvidia-smi -r) or power-cycle, and open a hardware ticket if it recurs",
    NVML_ERROR_CORRUPTED_INFOROM: "InfoROM corrupted: open a hardware ticket (RMA)",
}

RECORDING_SCHEMA = 1


class NvmlUnavailable(GpufleetError):
    """NVML could not be initialised (or enumerated the GPUs)."""

    def __init__(self, code: int, text: str = "") -> None:
        self.code = code
        self.text = text or NVML_ERROR_TEXT.get(code, f"NVML error {code}")
        super().__init__(f"NVML unavailable: {self.text} (NVML error {code})")

    @property
    def no_driver(self) -> bool:
        """True when there simply is no driver (library missing / module not loaded)."""
        return self.code in NO_DRIVER_CODES

    @property
    def remedy(self) -> str:
        return NVML_ERROR_REMEDY.get(self.code, "see `nvidia-smi` and `journalctl -k`")


@dataclass(frozen=True)
class GpuReading:
    """Everything the checks need about one GPU. ``None``: not reported by this GPU."""

    index: int
    pci_bus_id: str = ""  # "00000000:3B:00.0", the nvidia-smi spelling
    name: str = ""
    uuid: str = ""
    error: str | None = None  # set when the GPU could not be read at all (e.g. GPU lost)
    error_code: int | None = None
    compute_capability: tuple[int, int] | None = None
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlink: tuple[tuple[int, bool], ...] = ()  # (link, active) for each present link
    clock_event_reasons: int | None = None
    utilization_gpu: int | None = None  # percent
    memory_total: int | None = None  # bytes
    memory_used: int | None = None
    # NVSwitch fabric (nvmlDeviceGetGpuFabricInfoV; Hopper and newer, see gpufleet.node.nvswitch)
    fabric_state: int | None = None  # nvmlGpuFabricState_t: 0 not supported .. 3 completed
    fabric_status: int | None = None  # nvmlReturn_t of the fabric registration (0 success)
    fabric_cluster_uuid: str | None = None
    fabric_clique_id: int | None = None

    @property
    def label(self) -> str:
        """How messages and records name the GPU: index + PCI bus id."""
        return f"{self.index} ({self.pci_bus_id or 'unknown PCI bus id'})"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["nvlink"] = {str(link): active for link, active in self.nvlink}
        cc = self.compute_capability
        data["compute_capability"] = None if cc is None else [cc[0], cc[1]]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuReading:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known - {"after_load"}
        if unknown:
            raise ValueError(f"unknown GPU reading keys: {sorted(unknown)}")
        kwargs = {k: v for k, v in data.items() if k in known}
        links = kwargs.get("nvlink") or {}
        kwargs["nvlink"] = tuple(sorted((int(k), bool(v)) for k, v in dict(links).items()))
        cc = kwargs.get("compute_capability")
        kwargs["compute_capability"] = None if cc is None else (int(cc[0]), int(cc[1]))
        return cls(**kwargs)


@dataclass(frozen=True)
class NodeReading:
    """One NVML snapshot of a node."""

    driver_version: str
    cuda_driver_version: int | None  # e.g. 12020 for CUDA 12.2
    gpus: tuple[GpuReading, ...]

    @property
    def cuda_driver_version_str(self) -> str | None:
        return cuda_int_to_str(self.cuda_driver_version)

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [g.to_dict() for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeReading:
        return cls(
            driver_version=str(data["driver_version"]),
            cuda_driver_version=data.get("cuda_driver_version"),
            gpus=tuple(GpuReading.from_dict(g) for g in data.get("gpus", [])),
        )


def cuda_int_to_str(value: int | None) -> str | None:
    """NVML's CUDA driver version integer to "major.minor" (12020 → "12.2")."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


class NvmlReader(Protocol):
    """What the checks read NVML through."""

    def read(self) -> NodeReading:
        """Read the whole node. Raises :class:`NvmlUnavailable`."""
        ...

    def reread_gpu(self, index: int) -> GpuReading:
        """Read one GPU again (used after putting load on it)."""
        ...


# --------------------------------------------------------------------------- recordings


def load_recording(path: str | Path) -> dict[str, Any]:
    """Load a node recording (JSON object with an ``"nvml"`` section)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "nvml" not in data:
        raise ValueError(f"{path}: not a gpufleet NVML recording (no 'nvml' key)")
    if data.get("schema", RECORDING_SCHEMA) != RECORDING_SCHEMA:
        raise ValueError(f"{path}: unsupported recording schema {data.get('schema')!r}")
    return data


class RecordedReader:
    """Replays a recording. ``{"nvml": {"error": 12}}`` replays an NVML init failure.

    A GPU entry may carry ``"after_load": {...}``: the keys that change when the GPU is
    re-read under load (used to replay the PCIe idle-downshift re-check).
    """

    def __init__(self, recording: Mapping[str, Any]) -> None:
        self._nvml: Mapping[str, Any] = recording["nvml"]

    @classmethod
    def from_file(cls, path: str | Path) -> RecordedReader:
        return cls(load_recording(path))

    def read(self) -> NodeReading:
        if "error" in self._nvml:
            code = int(self._nvml["error"])
            raise NvmlUnavailable(code, str(self._nvml.get("error_text", "")))
        return NodeReading.from_dict(self._nvml)

    def has_after_load(self, index: int) -> bool:
        return "after_load" in self._gpu_raw(index)

    def reread_gpu(self, index: int) -> GpuReading:
        raw = self._gpu_raw(index)
        base = GpuReading.from_dict(raw)
        after = raw.get("after_load")
        if not after:
            return base
        merged = {**base.to_dict(), **after}
        return GpuReading.from_dict(merged)

    def _gpu_raw(self, index: int) -> Mapping[str, Any]:
        for raw in self._nvml.get("gpus", []):
            if int(raw["index"]) == index:
                return dict(raw)
        raise KeyError(f"no GPU {index} in recording")


# --------------------------------------------------------------------------- pynvml

T = TypeVar("T")


class PynvmlReader:
    """Reads the real NVML through nvidia-ml-py. Initialises on first use."""

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = nvml  # injectable module for tests; default: import pynvml lazily
        self._initialised = False

    # -- plumbing
    def _lib(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # noqa: PLC0415 (lazy: the planner path never imports NVML)
            except ImportError as exc:
                raise NvmlUnavailable(
                    NVML_ERROR_LIBRARY_NOT_FOUND,
                    f"Python module pynvml not importable ({exc}); install nvidia-ml-py",
                ) from exc
            self._nvml = pynvml
        return self._nvml

    def _init(self) -> None:
        if self._initialised:
            return
        lib = self._lib()
        try:
            lib.nvmlInit()
        except lib.NVMLError as exc:
            raise NvmlUnavailable(int(exc.value), NVML_ERROR_TEXT.get(int(exc.value), "")) from exc
        self._initialised = True

    def close(self) -> None:
        if self._initialised:
            lib = self._lib()
            with suppress(lib.NVMLError):
                lib.nvmlShutdown()
            self._initialised = False

    def _opt(self, fn: Callable[[], T]) -> T | None:
        """Call an NVML getter; absent counters (not supported, invalid argument) → None."""
        lib = self._lib()
        try:
            return fn()
        except lib.NVMLError as exc:
            if int(exc.value) in ABSENT_CODES or int(exc.value) == NVML_ERROR_NO_PERMISSION:
                return None
            raise

    # -- readings
    def read(self) -> NodeReading:
        self._init()
        lib = self._lib()
        try:
            driver = str(lib.nvmlSystemGetDriverVersion())
            cuda = self._opt(lib.nvmlSystemGetCudaDriverVersion)
            count = int(lib.nvmlDeviceGetCount())
        except lib.NVMLError as exc:
            raise NvmlUnavailable(int(exc.value), NVML_ERROR_TEXT.get(int(exc.value), "")) from exc
        gpus = tuple(self.reread_gpu(i) for i in range(count))
        return NodeReading(
            driver_version=driver,
            cuda_driver_version=None if cuda is None else int(cuda),
            gpus=gpus,
        )

    def reread_gpu(self, index: int) -> GpuReading:
        self._init()
        lib = self._lib()
        try:
            return self._read_gpu(index)
        except lib.NVMLError as exc:
            code = int(exc.value)
            text = NVML_ERROR_TEXT.get(code) or str(exc)
            bus_id = ""
            with suppress(lib.NVMLError):  # name the GPU if its PCI id is still readable
                bus_id = _text(
                    lib.nvmlDeviceGetPciInfo(lib.nvmlDeviceGetHandleByIndex(index)).busId
                )
            return GpuReading(
                index=index, pci_bus_id=bus_id, error=f"{text} (NVML error {code})", error_code=code
            )

    def _read_gpu(self, index: int) -> GpuReading:
        lib = self._lib()
        h = lib.nvmlDeviceGetHandleByIndex(index)
        opt = self._opt
        pci = lib.nvmlDeviceGetPciInfo(h)
        bus_id = _text(pci.busId)
        ecc = opt(lambda: lib.nvmlDeviceGetEccMode(h))
        rows = opt(lambda: lib.nvmlDeviceGetRemappedRows(h))
        util = opt(lambda: lib.nvmlDeviceGetUtilizationRates(h))
        mem = opt(lambda: lib.nvmlDeviceGetMemoryInfo(h))
        cc = opt(lambda: lib.nvmlDeviceGetCudaComputeCapability(h))
        persistence = opt(lambda: lib.nvmlDeviceGetPersistenceMode(h))
        pending_pages = opt(lambda: lib.nvmlDeviceGetRetiredPagesPendingStatus(h))
        return GpuReading(
            index=index,
            pci_bus_id=bus_id,
            name=str(lib.nvmlDeviceGetName(h)),
            uuid=str(opt(lambda: lib.nvmlDeviceGetUUID(h)) or ""),
            compute_capability=None if cc is None else (int(cc[0]), int(cc[1])),
            persistence_mode=None if persistence is None else bool(persistence),
            ecc_enabled=None if ecc is None else bool(ecc[0]),
            ecc_pending=None if ecc is None else bool(ecc[1]),
            ecc_volatile_uncorrected=self._ecc(h, counter=0),
            ecc_aggregate_uncorrected=self._ecc(h, counter=1),
            retired_pages_sbe=self._retired(h, cause=0),
            retired_pages_dbe=self._retired(h, cause=1),
            retired_pages_pending=None if pending_pages is None else bool(pending_pages),
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapped_rows_failure=None if rows is None else bool(rows[3]),
            pcie_gen_current=opt(lambda: int(lib.nvmlDeviceGetCurrPcieLinkGeneration(h))),
            pcie_gen_max=self._pcie_gen_max(h),
            pcie_width_current=opt(lambda: int(lib.nvmlDeviceGetCurrPcieLinkWidth(h))),
            pcie_width_max=opt(lambda: int(lib.nvmlDeviceGetMaxPcieLinkWidth(h))),
            nvlink=self._nvlinks(h),
            clock_event_reasons=self._clock_reasons(h),
            utilization_gpu=None if util is None else int(util.gpu),
            memory_total=None if mem is None else int(mem.total),
            memory_used=None if mem is None else int(mem.used),
            **self._fabric(h),
        )

    def _ecc(self, h: Any, counter: int) -> int | None:
        lib = self._lib()
        # errorType 1 = uncorrected; counter 0 = volatile, 1 = aggregate
        value = self._opt(lambda: lib.nvmlDeviceGetTotalEccErrors(h, 1, counter))
        return None if value is None else int(value)

    def _retired(self, h: Any, cause: int) -> int | None:
        lib = self._lib()
        # cause 0 = multiple single-bit ECC errors, 1 = double-bit ECC error
        pages = self._opt(lambda: lib.nvmlDeviceGetRetiredPages(h, cause))
        return None if pages is None else len(pages)

    def _pcie_gen_max(self, h: Any) -> int | None:
        """Max generation of the link (GPU and slot): nvmlDeviceGetMaxPcieLinkGeneration."""
        lib = self._lib()
        return self._opt(lambda: int(lib.nvmlDeviceGetMaxPcieLinkGeneration(h)))

    def _nvlinks(self, h: Any) -> tuple[tuple[int, bool], ...]:
        lib = self._lib()
        max_links = int(getattr(lib, "NVML_NVLINK_MAX_LINKS", 18))
        links: list[tuple[int, bool]] = []
        for link in range(max_links):
            state = self._opt(lambda link=link: lib.nvmlDeviceGetNvLinkState(h, link))  # type: ignore[misc]
            if state is not None:
                links.append((link, bool(state)))
        return tuple(links)

    def _fabric(self, h: Any) -> dict[str, Any]:
        """The GPU's NVSwitch fabric info (V call first, then the deprecated one); {} if absent."""
        lib = self._lib()
        for call, struct in (
            ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
            ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
        ):
            getter, make = getattr(lib, call, None), getattr(lib, struct, None)
            if getter is None or make is None:
                continue
            info = make()
            if self._opt(lambda g=getter, i=info: g(h, ctypes.byref(i))) is None:  # type: ignore[misc]
                continue
            raw = bytes(info.clusterUuid)
            hexed = raw.hex()
            return {
                "fabric_state": int(info.state),
                "fabric_status": int(info.status),
                "fabric_cluster_uuid": f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-"
                f"{hexed[16:20]}-{hexed[20:32]}",
                "fabric_clique_id": int(info.cliqueId),
            }
        return {}

    def _clock_reasons(self, h: Any) -> int | None:
        lib = self._lib()
        getter = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:  # nvidia-ml-py older than 12.535: only the deprecated name
            getter = lib.nvmlDeviceGetCurrentClocksThrottleReasons
        try:
            return int(getter(h))
        except lib.NVMLError as exc:
            if int(exc.value) == NVML_ERROR_FUNCTION_NOT_FOUND:  # driver older than the call
                legacy = lib.nvmlDeviceGetCurrentClocksThrottleReasons
                return self._opt(lambda: int(legacy(h)))
            if int(exc.value) in ABSENT_CODES:
                return None
            raise


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@contextmanager
def open_reader(recording: str | Path | None = None) -> Iterator[NvmlReader]:
    """The reader the checks use: a recording when given, else the real NVML."""
    if recording is not None:
        yield RecordedReader.from_file(recording)
        return
    reader = PynvmlReader()
    try:
        yield reader
    finally:
        reader.close()


# --------------------------------------------------------------------------- CLI


def record_node(reader: NvmlReader) -> dict[str, Any]:
    """A recording of this node's NVML state (the ``nvml`` section, or its error)."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        nvml: dict[str, Any] = reader.read().to_dict()
    except NvmlUnavailable as exc:
        nvml = {"error": exc.code, "error_text": exc.text}
    return {"schema": RECORDING_SCHEMA, "recorded_at": now, "nvml": nvml}


__all__ = [
    "GpuReading",
    "NodeReading",
    "NvmlReader",
    "NvmlUnavailable",
    "PynvmlReader",
    "RecordedReader",
    "cuda_int_to_str",
    "load_recording",
    "open_reader",
    "record_node",
]
