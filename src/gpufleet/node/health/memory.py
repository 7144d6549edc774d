"""GPU memory health: ECC mode and errors, page retirement, row remapping (DCGM level 1)."""

from __future__ import annotations

from gpufleet.node.health._common import gpu_unreadable, rec, unsupported
from gpufleet.node.health.names import ECC_MODE, ECC_UNCORRECTABLE, PAGE_RETIREMENT, ROW_REMAP
from gpufleet.node.nvml import GpuReading
from gpufleet.results import Record

#: DCGM: fail when retired pages (single-bit + double-bit) reach this many.
DCGM_RETIRED_PAGES_LIMIT = 63
#: DCGM: fail when uncorrectable remapped rows reach this many.
DCGM_UNCORRECTABLE_REMAPS_LIMIT = 512
#: azurehpc-health-checks check_gpu_ecc: any uncorrectable (volatile) error fails.
VOLATILE_UNCORRECTABLE_LIMIT = 0


def ecc_mode(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(ECC_MODE, gpu)) is not None:
        return bad
    if gpu.ecc_enabled is None:
        return unsupported(ECC_MODE, gpu, "ECC")
    if gpu.ecc_enabled:
        return rec(ECC_MODE, "pass", "ECC enabled", gpu=gpu, value=1, threshold=1)
    pending = " (enabled at next reset)" if gpu.ecc_pending else ""
    return rec(
        ECC_MODE,
        "warn",
        f"ECC is disabled{pending} (value 0, expected 1): memory errors go undetected.",
        gpu=gpu,
        value=0,
        threshold=1,
        remedy="nvidia-smi -i <gpu> -e 1, then reset the GPU or reboot",
    )


def ecc_uncorrectable(gpu: GpuReading) -> Record:
    if (bad := gpu_unreadable(ECC_UNCORRECTABLE, gpu)) is not None:
        return bad
    v = gpu.ecc_volatile_uncorrected
    if v is None:
        return unsupported(ECC_UNCORRECTABLE, gpu, "ECC error counters")
    ok = v <= VOLATILE_UNCORRECTABLE_LIMIT
    agg = gpu.ecc_aggregate_uncorrected
    return rec(
        ECC_UNCORRECTABLE,
        "pass" if ok else "fail",
        f"{v} volatile uncorrectable ECC error(s) since the last driver load "
        f"(threshold {VOLATILE_UNCORRECTABLE_LIMIT}; aggregate {agg})."
        if not ok
        else "no volatile uncorrectable ECC errors",
        gpu=gpu,
        value=v,
        threshold=f"<= {VOLATILE_UNCORRECTABLE_LIMIT}",
        remedy="drain the node, reset the GPU (nvidia-smi -r) so the rows are remapped, "
        "re-run the checks; RMA if errors recur",
    )


def page_retirement(gpu: GpuReading) -> Record:
    """Dynamic page retirement (pre-Ampere; Ampere+ report NOT_SUPPORTED and use row remap)."""
    if (bad := gpu_unreadable(PAGE_RETIREMENT, gpu)) is not None:
        return bad
    sbe, dbe, pending = gpu.retired_pages_sbe, gpu.retired_pages_dbe, gpu.retired_pages_pending
    if sbe is None and dbe is None and pending is None:
        return unsupported(
            PAGE_RETIREMENT, gpu, "page retirement (Ampere and newer use row remapping)"
        )
    total = (sbe or 0) + (dbe or 0)
    value = {"single_bit": sbe, "double_bit": dbe, "pending": pending, "total": total}
    threshold = f"pending == False, total < {DCGM_RETIRED_PAGES_LIMIT}"
    problems: list[str] = []
    remedies: list[str] = []
    if pending:
        problems.append("a page retirement is pending")
        remedies.append("reset the GPU (nvidia-smi -r) or reboot to retire the page")
    if total >= DCGM_RETIRED_PAGES_LIMIT:
        problems.append(f"{total} retired pages (DCGM limit {DCGM_RETIRED_PAGES_LIMIT})")
        remedies.append("the GPU has used its retirement budget: RMA")
    if problems:
        return rec(
            PAGE_RETIREMENT, "fail", "; ".join(problems) + f" [value {value}].", gpu=gpu,
            value=value, threshold=threshold, remedy="; ".join(remedies),
        )  # fmt: skip
    return rec(
        PAGE_RETIREMENT, "pass", f"{total} retired pages, none pending", gpu=gpu,
        value=value, threshold=threshold,
    )  # fmt: skip


def row_remap(gpu: GpuReading) -> Record:
    """Row remapping (Ampere and newer data-centre GPUs)."""
    if (bad := gpu_unreadable(ROW_REMAP, gpu)) is not None:
        return bad
    unc, pending, failure = (
        gpu.remapped_rows_uncorrectable,
        gpu.remapped_rows_pending,
        gpu.remapped_rows_failure,
    )
    if unc is None and pending is None and failure is None:
        return unsupported(ROW_REMAP, gpu, "row remapping")
    value = {
        "correctable": gpu.remapped_rows_correctable,
        "uncorrectable": unc,
        "pending": pending,
        "failure": failure,
    }
    threshold = (
        f"pending == False, failure == False, uncorrectable < {DCGM_UNCORRECTABLE_REMAPS_LIMIT}"
    )
    problems: list[str] = []
    remedies: list[str] = []
    if pending:
        problems.append("a row remap is pending")
        remedies.append("reset the GPU (nvidia-smi -r) or reboot to apply the remap")
    if failure:
        problems.append("a row remap failed")
        remedies.append("remapping failed: RMA the GPU")
    if unc is not None and unc >= DCGM_UNCORRECTABLE_REMAPS_LIMIT:
        problems.append(
            f"{unc} rows remapped for uncorrectable errors "
            f"(DCGM limit {DCGM_UNCORRECTABLE_REMAPS_LIMIT})"
        )
        remedies.append("the GPU has exhausted its spare rows: RMA")
    if problems:
        return rec(
            ROW_REMAP, "fail", "; ".join(problems) + f" [value {value}].", gpu=gpu,
            value=value, threshold=threshold, remedy="; ".join(dict.fromkeys(remedies)),
        )  # fmt: skip
    return rec(
        ROW_REMAP, "pass", f"no pending or failed remaps, {unc} uncorrectable", gpu=gpu,
        value=value, threshold=threshold,
    )  # fmt: skip
