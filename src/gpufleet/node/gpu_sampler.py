"""Sample every GPU's clocks, clock-event reasons, temperature and power with NVML, for the
burn-in (:mod:`gpufleet.node.burnin` judges the samples).

One call of :meth:`NvmlSampler.sample` reads each GPU once: SM clock
(nvmlDeviceGetClockInfo, NVML_CLOCK_SM), GPU temperature (nvmlDeviceGetTemperature,
NVML_TEMPERATURE_GPU), power (nvmlDeviceGetPowerUsage, milliwatts) and the clock-event
reasons (nvmlDeviceGetCurrentClocksEventReasons, the older
nvmlDeviceGetCurrentClocksThrottleReasons where the binding lacks it). A value NVML refuses
is None in the sample; a node without NVML has no sampler (:func:`open_sampler` says why).
GPUs are labelled by NVML index; verify sets CUDA_DEVICE_ORDER=PCI_BUS_ID for the compute
processes, so torch's index of a GPU is NVML's when CUDA_VISIBLE_DEVICES is unset.
"""

# ruff: noqa: PLC0415  (pynvml is imported lazily on purpose)

from __future__ import annotations

import contextlib
from typing import Any

from gpufleet.node.burnin import Sample

NVML_CLOCK_SM = 1  # nvmlClockType_t
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t


class NvmlSampler:
    """Reads every GPU of the node; ``nvml`` is the pynvml module (a fake in tests)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [
            nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())
        ]

    def _read(self, call: str, h: Any, *args: int) -> Any:
        """``nvml.<call>(h, *args)``, None where NVML refuses it."""
        fn = getattr(self.nvml, call, None)
        if fn is None:
            return None
        try:
            return fn(h, *args)
        except self.nvml.NVMLError:
            return None

    def _reasons(self, h: Any) -> int | None:
        value = self._read("nvmlDeviceGetCurrentClocksEventReasons", h)
        if value is None:
            value = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return None if value is None else int(value)

    def sample(self, t: float) -> list[Sample]:
        out = []
        for i, h in enumerate(self.handles):
            power = self._read("nvmlDeviceGetPowerUsage", h)
            clock = self._read("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM)
            temp = self._read("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU)
            out.append(
                Sample(
                    t=round(t, 3),
                    gpu=str(i),
                    sm_clock_mhz=None if clock is None else int(clock),
                    temperature_c=None if temp is None else int(temp),
                    power_w=None if power is None else round(int(power) / 1000.0, 1),
                    reasons=self._reasons(h),
                )
            )
        return out

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()


def open_sampler() -> tuple[NvmlSampler | None, str]:
    """(the sampler, "") or (None, why there is none: no pynvml, no driver, no GPU)."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed in this env"
    try:
        sampler = NvmlSampler(pynvml)
    except pynvml.NVMLError as exc:
        return None, f"NVML cannot start: {exc}"
    if not sampler.handles:
        sampler.close()
        return None, "NVML lists no GPU"
    return sampler, ""
