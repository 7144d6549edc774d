"""nn.DataParallel over all visible GPUs (single process).

Outputs and gradients must match a single-device run; per-GPU memory is read from NVML
(nvidia-ml-py) after the step, falling back to torch.cuda.memory_allocated, and the GPU-0
imbalance (DataParallel gathers outputs and loss on device_ids[0]) is reported and judged
against ``--dp-imbalance-max`` (verify_dp_imbalance_max; gpufleet.node.dp_balance): above it
the test warns.
DataParallel needs at least 2 CUDA devices to scatter a batch: on CPU nodes and on nodes with
one GPU the test reports skip with that reason (with one device or none, DataParallel only
calls the module, which proves nothing about DataParallel).
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

from typing import Any

import pytest

from conftest import Mode, Smoke
from gpufleet.node import dp_balance

REMEDY = "check every GPU is visible (nvidia-smi -L, CUDA_VISIBLE_DEVICES) and run checks/"


def gpu_memory_used() -> tuple[list[int], str]:
    """Bytes used per visible GPU: NVML if it answers, else torch's allocator view."""
    import torch

    n = torch.cuda.device_count()
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            used = []
            for i in range(n):
                props = torch.cuda.get_device_properties(i)
                dom, bus, dev = (
                    getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")
                )
                # CUDA and NVML may order GPUs differently: match by PCI address when known
                h = (
                    pynvml.nvmlDeviceGetHandleByPciBusId(f"{dom:08x}:{bus:02x}:{dev:02x}.0")
                    if None not in (dom, bus, dev)
                    else pynvml.nvmlDeviceGetHandleByIndex(i)
                )
                used.append(int(pynvml.nvmlDeviceGetMemoryInfo(h).used))
            return used, "nvml"
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return [
            int(torch.cuda.memory_allocated(i)) for i in range(n)
        ], "torch.cuda.memory_allocated"


def _model(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))


@pytest.mark.gpu
def test_dataparallel_matches_single_device(
    mode: Mode, smoke: Smoke, request: pytest.FixtureRequest
) -> None:
    import torch

    smoke.note(remedy=REMEDY)
    if mode.mode != "gpu":
        pytest.skip("DataParallel needs at least 2 CUDA devices to scatter; no CUDA device here")
    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip(
            f"DataParallel needs at least 2 CUDA devices to scatter; {n} here "
            "(with one device it only calls the module)"
        )
    x = torch.randn(64 * n, 32)
    ref = _model().to("cuda:0")
    ref_out = ref(x.to("cuda:0"))
    ref_out.square().mean().backward()

    dp_module = _model().to("cuda:0")
    dp = torch.nn.DataParallel(dp_module, device_ids=list(range(n)))
    out = dp(x.to("cuda:0"))
    out.square().mean().backward()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    for a, b in zip(dp_module.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)

    used, source = gpu_memory_used()
    imbalance = dp_balance.verdict(used, float(request.config.getoption("--dp-imbalance-max")))
    smoke.meta(dataparallel_memory_bytes=used, dataparallel_memory_source=source)
    smoke.note(
        value=imbalance.value,
        threshold=imbalance.limit,
        status="warn" if imbalance.status == "warn" else "pass",
        remedy=imbalance.remedy,
        message=(
            f"{n} GPU(s): outputs/grads match single device; memory used per GPU ({source}): "
            + ", ".join(f"{u / 2**20:.0f} MiB" for u in used)
            + f"; {imbalance.text} (DataParallel gathers on GPU 0; prefer DDP)"
        ),
    )
