"""Automatic mixed precision with the non-deprecated torch.amp API.

CUDA: fp16 with torch.amp.GradScaler, bf16 where torch.cuda.is_bf16_supported() (bf16 needs
no scaler). CPU: bf16 autocast. A step must finish with a finite loss and, with the scaler,
a finite positive scale that did not back off (no inf found on a normal step).
"""

# ruff: noqa: PLC0415  (torch/NVML/jinja2/matplotlib are imported lazily on purpose)

from __future__ import annotations

import math

import pytest

from conftest import Mode, Smoke

# A scale a small model cannot overflow in fp16 on a normal step (default 2**16 could).
INIT_SCALE = 2.0**10

REMEDY = "check the driver/toolkit (run checks/); autocast must use torch.amp, not torch.cuda.amp"

CASES = [
    pytest.param("cuda", "float16", id="cuda-fp16-gradscaler"),
    pytest.param("cuda", "bfloat16", id="cuda-bf16"),
    pytest.param("cpu", "bfloat16", id="cpu-bf16"),
]


@pytest.mark.parametrize(("device", "dtype"), CASES)
def test_amp_step(device: str, dtype: str, mode: Mode, smoke: Smoke) -> None:
    import torch

    smoke.note(remedy=REMEDY)
    if device == "cuda":
        if mode.mode != "gpu":
            pytest.skip("CUDA autocast needs a CUDA device (CPU node: bf16 autocast on CPU runs)")
        if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            pytest.skip(f"{torch.cuda.get_device_name(0)} has no bf16 support")
    tdtype = getattr(torch, dtype)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    use_scaler = device == "cuda" and dtype == "float16"
    scaler = torch.amp.GradScaler(device, enabled=use_scaler, init_scale=INIT_SCALE)
    x = torch.randn(32, 64, device=device)
    y = torch.randn(32, 8, device=device)
    with torch.amp.autocast(device_type=device, dtype=tdtype):
        out = model(x)
        assert out.dtype == tdtype, f"autocast produced {out.dtype}, expected {tdtype}"
        loss = torch.nn.functional.mse_loss(out.float(), y)
    scaler.scale(loss).backward()  # type: ignore[no-untyped-call]  # torch: Tensor.backward is unannotated
    before = [p.detach().clone() for p in model.parameters()]
    scaler.step(opt)
    scaler.update()
    assert math.isfinite(float(loss.item())), f"loss {loss.item()}"
    changed = any(
        not torch.equal(b, p.detach()) for b, p in zip(before, model.parameters(), strict=True)
    )
    assert changed, "the optimizer step did not change any parameter"
    msg = f"{device} {dtype}: loss {loss.item():.4f}"
    if use_scaler:
        scale = float(scaler.get_scale())
        assert math.isfinite(scale), f"scale {scale}"
        assert scale > 0, f"scale {scale}"
        assert scale == INIT_SCALE, f"scaler backed off to {scale}: inf/nan found on a normal step"
        msg += f", scale {scale:g} (no inf found)"
    smoke.note(message=msg, value=round(float(loss.item()), 5))
