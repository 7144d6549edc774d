"""A fake pynvml module (two GPUs) for the NVML reader's error mapping, shared by the NVML
and HGX unit tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpufleet.node import nvml


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def fake_pynvml(**over: Any) -> SimpleNamespace:
    """Two GPUs: GPU 0 healthy with 4 NVLinks, GPU 1 without ECC / NVLink support."""

    def unsupported_on_1(result: Any) -> Any:
        def fn(h: int, *args: Any) -> Any:
            if h == 1:
                raise FakeNVMLError(nvml.NVML_ERROR_NOT_SUPPORTED)
            return result(*args) if callable(result) else result

        return fn

    def nvlink_state(h: int, link: int) -> int:
        if h == 1 or link >= 4:
            raise FakeNVMLError(nvml.NVML_ERROR_INVALID_ARGUMENT if h == 0 else 3)
        return 0 if link == 2 else 1

    def event_reasons(h: int) -> int:
        raise FakeNVMLError(nvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    ns = SimpleNamespace(
        NVMLError=FakeNVMLError,
        NVML_NVLINK_MAX_LINKS=18,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "570.133.20",
        nvmlSystemGetCudaDriverVersion=lambda: 12080,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(
            busId=f"00000000:{0x18 + h:02X}:00.0".encode()
        ),
        nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetCudaComputeCapability=lambda h: (9, 0),
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetEccMode=unsupported_on_1((1, 1)),
        nvmlDeviceGetTotalEccErrors=unsupported_on_1(lambda t, c: 3 if c == 1 else 0),
        nvmlDeviceGetRetiredPages=lambda h, cause: (_ for _ in ()).throw(FakeNVMLError(3)),
        nvmlDeviceGetRetiredPagesPendingStatus=lambda h: (_ for _ in ()).throw(FakeNVMLError(3)),
        nvmlDeviceGetRemappedRows=unsupported_on_1((0, 1, 0, 0)),
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 1,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetNvLinkState=nvlink_state,
        nvmlDeviceGetCurrentClocksEventReasons=event_reasons,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x41,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=0, memory=0),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=80 << 30, used=1 << 30, free=0),
    )
    for key, value in over.items():
        setattr(ns, key, value)
    return ns
