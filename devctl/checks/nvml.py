"""The nvml-health check: what DCGM's software tests and `nvidia-smi -q` would flag, judged on NVML's counters.

Uncorrectable ECC errors, retired pages or row remaps waiting for a reset,
active thermal or power slowdowns, and the temperature against the GPU's own
slowdown threshold (failure-modes.md §2.1-2.3). The counters are read by
devctl.discovery.nvml.nvml_health; a machine without the driver is a skip, not
a failure, unless the expectations ask for a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from devctl.checks.verdict import Verdict, failed, join, passed, skipped, warned
from devctl.model.hardware import GpuHealth

if TYPE_CHECKING:
    # collect/ runs the checks and hands each its Context: named here for the checker only (no runtime import upward).
    from devctl.collect.check_context import Context

# Within this many degrees of the slowdown threshold the GPU is about to throttle.
TEMPERATURE_MARGIN_C = 5


def gpu_problems(g: GpuHealth) -> tuple[list[str], list[str], str | None]:
    """(failures, warnings, remediation) for one GPU."""
    fails: list[str] = []
    warns: list[str] = []
    fix = None
    where = f"GPU {g.index}" + (f" ({g.pci_bus_id})" if g.pci_bus_id else "")
    if g.ecc_uncorrected_volatile:
        fails.append(f"{where}: {g.ecc_uncorrected_volatile} uncorrectable ECC error(s) since the driver loaded")
        fix = fix or f"drain GPU {g.index}; check dmesg for Xid 48/94/95 and run dcgmi diag -r 3"
    elif g.ecc_uncorrected_aggregate:
        warns.append(f"{where}: {g.ecc_uncorrected_aggregate} uncorrectable ECC error(s) in its lifetime")
    if g.remap_failed:
        fails.append(f"{where}: a row remapping failed")
        fix = fix or f"drain GPU {g.index} and contact the vendor (remapping failure)"
    if g.remap_pending or g.retired_pages_pending:
        fails.append(f"{where}: a row remap / page retirement is pending until the GPU is reset")
        fix = fix or f"reset the GPU when idle: sudo nvidia-smi -r -i {g.index} (or reboot)"
    if g.retired_pages_double_bit:
        warns.append(f"{where}: {g.retired_pages_double_bit} page(s) retired for double-bit ECC errors")
    if g.remapped_rows_uncorrectable:
        warns.append(f"{where}: {g.remapped_rows_uncorrectable} row(s) remapped after uncorrectable errors")
    if g.temperature_c is not None and g.slowdown_threshold_c:
        if g.temperature_c >= g.slowdown_threshold_c:
            fails.append(f"{where}: {g.temperature_c} C, at or above its slowdown threshold {g.slowdown_threshold_c} C")
            fix = fix or "check the cooling (fans, airflow, inlet temperature) before running jobs here"
        elif g.temperature_c >= g.slowdown_threshold_c - TEMPERATURE_MARGIN_C:
            warns.append(f"{where}: {g.temperature_c} C, within {TEMPERATURE_MARGIN_C} C of its slowdown threshold {g.slowdown_threshold_c} C")
    if g.throttle_reasons:
        warns.append(f"{where}: clocks slowed by {', '.join(g.throttle_reasons)}")
    if warns and fix is None:
        fix = "see nvidia-smi -q -d PERFORMANCE,TEMPERATURE,ECC,PAGE_RETIREMENT,ROW_REMAPPER for this GPU"
    return fails, warns, fix


def check_nvml_health(ctx: Context) -> Verdict:
    health = ctx.nvml()
    wants_gpu = ctx.expectations.wants_platform("cuda", "gpu")
    hw = ctx.hardware()
    nvidia_present = bool(hw.nvidia_pci or any("nvidia" in n for n in hw.nvidia_device_nodes))
    if health.status != "ok" or not health.gpus:
        reason = health.reason or "NVML sees no GPU"
        if wants_gpu or (health.status == "error" and nvidia_present):
            return failed(f"NVML: {reason}", "install or reload the NVIDIA driver (nvidia-smi must work)", status=health.status)
        return skipped(f"NVML: {reason}", status=health.status)
    fails, warns, fixes = [], [], []
    for g in health.gpus:
        f, w, fix = gpu_problems(g)
        fails += f
        warns += w
        if fix:
            fixes.append(fix)
    details = {"gpus": [_gpu_details(g) for g in health.gpus]}
    if fails:
        return failed(join(fails, 2), fixes[0], **details)
    if warns:
        return warned(join(warns, 2), fixes[0], **details)
    temps = [g.temperature_c for g in health.gpus if g.temperature_c is not None]
    hottest = f", hottest {max(temps)} C" if temps else ""
    return passed(f"{len(health.gpus)} GPU(s): no uncorrectable ECC, no pending remaps, no thermal or power slowdown{hottest}", **details)


def _gpu_details(g: GpuHealth) -> dict:
    from devctl.model import to_jsonable

    d = to_jsonable(g)
    d.pop("processes", None)
    return d
