"""The nvml-health check: what DCGM's software tests and `nvidia-smi -q` would flag, read through NVML.

Uncorrectable ECC errors, retired pages or row remaps waiting for a reset,
active thermal or power slowdowns, and the temperature against the GPU's own
slowdown threshold (failure-modes.md §2.1-2.3). pynvml is imported inside the
functions; a machine without the driver is a skip, not a failure, unless the
expectations ask for a GPU.
"""

from __future__ import annotations

from typing import Any

from devctl.checks.verdict import Verdict, failed, join, passed, skipped, warned
from devctl.hostroot import HostRoot
from devctl.model.check import GpuHealth, GpuProcess, NvmlHealth

# Within this many degrees of the slowdown threshold the GPU is about to throttle.
TEMPERATURE_MARGIN_C = 5
# NVML clock-event bits that mean "slowed down by heat or power"; idle, sync boost and
# application/display clock settings are not problems.
_THROTTLE_BITS = (
    ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksEventReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "sw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
)


def collect_nvml_health(root: HostRoot) -> NvmlHealth:
    """Health counters of every GPU NVML sees; never raises for a missing driver."""
    if not root.is_real:
        return NvmlHealth("unavailable", "not read under --host-root: NVML talks to this machine's driver", ())
    from devctl.discovery.nvidia import NvmlUnavailable, nvml_initialized

    try:
        with nvml_initialized() as pynvml:
            try:
                count = pynvml.nvmlDeviceGetCount()
            except pynvml.NVMLError as e:
                return NvmlHealth("error", f"NVML could not count the GPUs: {e}", ())
            return NvmlHealth("ok", None, tuple(_gpu_health(pynvml, i) for i in range(count)))
    except NvmlUnavailable as e:
        return NvmlHealth(e.status, e.reason, ())


def _gpu_health(pynvml: Any, index: int) -> GpuHealth:
    from devctl.discovery.nvidia import normalize_pci_bus_id, query

    unavailable: dict[str, str] = {}

    def get(field: str, fn: str, *args: Any) -> Any:
        value, reason = query(fn, *args)
        if reason is not None:
            unavailable[field] = reason
        return value

    handle = get("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuHealth(index, None, None, None, None, None, None, None, None, None, (), None, None, None, None, (), unavailable)
    unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    volatile = get("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors", handle, unc, pynvml.NVML_VOLATILE_ECC)
    aggregate = get("ecc_uncorrected_aggregate", "nvmlDeviceGetTotalEccErrors", handle, unc, pynvml.NVML_AGGREGATE_ECC)
    dbe_pages = get(
        "retired_pages_double_bit", "nvmlDeviceGetRetiredPages", handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    remap = get("remapped_rows", "nvmlDeviceGetRemappedRows", handle)  # (correctable, uncorrectable, pending, failed)
    reasons = get("throttle_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers older than the "clocks event" rename
        unavailable.pop("throttle_reasons", None)
        reasons = get("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    memory = get("memory", "nvmlDeviceGetMemoryInfo", handle)
    pci = get("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    procs = get("processes", "nvmlDeviceGetComputeRunningProcesses", handle) or []
    return GpuHealth(
        index=index,
        name=get("name", "nvmlDeviceGetName", handle),
        pci_bus_id=normalize_pci_bus_id(pci.busId) if pci is not None else None,
        ecc_uncorrected_volatile=volatile,
        ecc_uncorrected_aggregate=aggregate,
        retired_pages_double_bit=len(dbe_pages) if dbe_pages is not None else None,
        retired_pages_pending=(pending == pynvml.NVML_FEATURE_ENABLED) if pending is not None else None,
        remapped_rows_uncorrectable=remap[1] if remap is not None else None,
        remap_pending=bool(remap[2]) if remap is not None else None,
        remap_failed=bool(remap[3]) if remap is not None else None,
        throttle_reasons=tuple(name for attr, name in _THROTTLE_BITS if reasons and reasons & getattr(pynvml, attr, 0)),
        temperature_c=get("temperature_c", "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU),
        slowdown_threshold_c=get(
            "slowdown_threshold_c", "nvmlDeviceGetTemperatureThreshold", handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        memory_total_bytes=memory.total if memory is not None else None,
        memory_used_bytes=memory.used if memory is not None else None,
        # usedGpuMemory is None when NVML cannot attribute memory (MIG, or no permission).
        processes=tuple(GpuProcess(p.pid, getattr(p, "usedGpuMemory", None)) for p in procs),
        unavailable=unavailable,
    )


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


def check_nvml_health(ctx) -> Verdict:
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
