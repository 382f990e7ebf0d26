"""How busy each GPU is: NVML's GPM counters (Hopper and newer), else NVML's utilization, said as what it is.

GPM gives a figure between two samples: devctl takes the first, waits `window_s`, takes the second, and asks
nvmlGpmMetricsGet for the counters in between. A `BusyReader` kept across the samples of `memstats --watch`
keeps each GPU's last sample, so every refresh after the first measures the whole interval since the one before
and waits for nothing. NVML is reached as everywhere else in devctl (devctl.discovery.nvml: its init and
shutdown, `query` turning every NVML error into a reason); pynvml is imported only inside the reads.
"""

from __future__ import annotations

import time
from typing import Any

from devctl.discovery.nvml import NvmlUnavailable, nvml_initialized, query
from devctl.model.busy import SOURCE_LABELS, BusyCounters, BusySource, GpuBusy, MigBusy, ProcessBusy

# The one-shot window: long enough that a training step's phases average out somewhat, short enough that
# `devctl memstats` does not feel it (its JAX probe takes seconds). The watch uses its refresh interval instead.
ONE_SHOT_WINDOW_S = 0.2
# NVML refreshes GPM's counters every 100 ms and refuses samples taken closer together than that.
_MIN_GAP_S = 0.11
_MIB = 1 << 20

# counter field -> (the NVML_GPM_METRIC_* name, scale from GPM's unit: percent -> ratio, MiB/s -> bytes/s)
_METRICS: dict[str, tuple[str, float]] = {
    "sm_active_ratio": ("NVML_GPM_METRIC_SM_UTIL", 0.01),
    "sm_occupancy_ratio": ("NVML_GPM_METRIC_SM_OCCUPANCY", 0.01),
    "tensor_active_ratio": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    "tensor_hmma_active_ratio": ("NVML_GPM_METRIC_HMMA_TENSOR_UTIL", 0.01),
    "dram_active_ratio": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    "gr_engine_active_ratio": ("NVML_GPM_METRIC_GRAPHICS_UTIL", 0.01),
    "pcie_tx_bytes_per_s": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", _MIB),
    "pcie_rx_bytes_per_s": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", _MIB),
    "nvlink_tx_bytes_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", _MIB),
    "nvlink_rx_bytes_per_s": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", _MIB),
}
_NO_GPM = "this GPU has no GPM counters (Hopper and newer have them)"
# NVML samples each process at its own period (1/6 s to 1 s, by product): a one-shot read looks this far back.
_PROCESS_LOOKBACK_S = 1.0


class _Target:
    """One thing GPM samples: a whole GPU (gpu_instance_id None) or one MIG GPU instance."""

    def __init__(self, index: int, handle: Any, gpu_instance_id: int | None = None, uuid: str | None = None):
        self.index, self.handle, self.gpu_instance_id, self.uuid = index, handle, gpu_instance_id, uuid

    @property
    def key(self) -> tuple[int, int | None]:
        return self.index, self.gpu_instance_id


class BusyReader:
    """Reads every GPU's busy-ness; kept across the samples of a watch, it measures each interval whole.

    `keep`: hold each GPU's latest GPM sample for the next read (the watch; call `close` at the end, inside the
    same NVML session). Without it, each read takes two samples `window_s` apart and frees both.
    """

    def __init__(self, window_s: float = ONE_SHOT_WINDOW_S, *, keep: bool = False):
        self.window_s = window_s
        self.keep = keep
        self._held: dict[tuple[int, int | None], tuple[Any, float]] = {}  # target key -> (sample, monotonic time)
        self._last_read: float | None = None  # wall time of the last read: per-process samples since then

    def read(self) -> tuple[dict[int, GpuBusy], str | None]:
        """Each GPU's busy-ness by NVML index, or ({}, the reason) where NVML cannot be used."""
        try:
            with nvml_initialized() as pynvml:
                return _read(pynvml, self), None
        except NvmlUnavailable as e:
            return {}, e.reason

    def close(self) -> None:
        """Free the held samples (inside the NVML session they were taken in)."""
        held, self._held = self._held, {}
        for sample, _ in held.values():
            query("nvmlGpmSampleFree", sample)


def _read(pynvml: Any, reader: BusyReader) -> dict[int, GpuBusy]:
    count, _ = query("nvmlDeviceGetCount")
    gpus: dict[int, dict[str, Any]] = {}
    targets: list[_Target] = []
    for index in range(count or 0):
        unavailable: dict[str, str] = {}
        handle, reason = query("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            gpus[index] = {"gpm": False, "unavailable": {"gpu": reason or "unknown"}, "rates": None}
            continue
        rates, reason = query("nvmlDeviceGetUtilizationRates", handle)
        if rates is None:
            unavailable["kernel_active_ratio"] = unavailable["memory_active_ratio"] = reason or "unknown"
        support, reason = query("nvmlGpmQueryDeviceSupport", handle)
        gpm = bool(support is not None and support.isSupportedDevice)
        if not gpm:
            unavailable["counters"] = _NO_GPM if support is not None or reason == "not supported by this GPU or driver" else f"GPM: {reason}"
        migs = _mig_instances(pynvml, index, handle, unavailable) if gpm else []
        gpus[index] = {"gpm": gpm, "unavailable": unavailable, "rates": rates, "migs": migs}
        if gpm:
            targets.append(_Target(index, handle))
            targets += migs
    figures = _sample(pynvml, reader, targets)
    now = time.time()
    since = reader._last_read if reader.keep and reader._last_read is not None else now - _PROCESS_LOOKBACK_S
    reader._last_read = now
    out: dict[int, GpuBusy] = {}
    for index, g in gpus.items():
        rates, unavailable = g["rates"], g["unavailable"]
        counters, window_s = BusyCounters(), None
        if g["gpm"]:
            counters, window_s, reason, missing = figures[(index, None)]
            if reason:
                unavailable["counters"] = reason
            unavailable.update(missing)
        mig = []
        for t in g.get("migs", ()):
            mig_counters, mig_window_s, reason, missing = figures[t.key]
            mig.append(MigBusy(t.gpu_instance_id, t.uuid, mig_counters, {"counters": reason} if reason else missing))
            # A GPU in MIG mode is sampled per instance only: its window is its instances' (taken together).
            window_s = window_s if window_s is not None else mig_window_s
        source: BusySource = "gpm" if g["gpm"] else "nvml-utilization"
        if g["gpm"] and all(v is None for v in vars(counters).values()) and not any(m.unavailable.get("counters") is None for m in mig):
            # GPM said it could, then gave nothing (no permission, a driver fault): NVML's utilization is all there is.
            source, window_s = "nvml-utilization", None
        out[index] = GpuBusy(
            index=index, source=source, label=SOURCE_LABELS[source], window_s=window_s, counters=counters,
            kernel_active_ratio=_ratio(rates.gpu) if rates is not None else None,
            memory_active_ratio=_ratio(rates.memory) if rates is not None else None,
            mig=mig, processes=_processes(index, since, unavailable), process_window_s=round(now - since, 3),
            unavailable=unavailable,
        )  # fmt: skip
    return out


def _processes(index: int, since: float, unavailable: dict[str, str]) -> list[ProcessBusy]:
    """Each process's mean share of the GPU in NVML's own samples since `since` (Unix time); [] when none ran."""
    handle, _ = query("nvmlDeviceGetHandleByIndex", index)
    samples, reason = query("nvmlDeviceGetProcessUtilization", handle, int(since * 1e6)) if handle is not None else ([], None)
    if samples is None:
        if reason != "Not Found":  # NVML's answer when no process ran in the window
            unavailable["processes"] = reason or "unknown"
        return []
    by_pid: dict[int, list[Any]] = {}
    for s in samples:
        by_pid.setdefault(int(s.pid), []).append(s)
    return [
        ProcessBusy(pid, _ratio(sum(s.smUtil for s in mine) / len(mine)), _ratio(sum(s.memUtil for s in mine) / len(mine)), len(mine))
        for pid, mine in sorted(by_pid.items())
    ]


def _mig_instances(pynvml: Any, index: int, handle: Any, unavailable: dict[str, str]) -> list[_Target]:
    """The GPU instances of a GPU in MIG mode, as GPM targets; [] when MIG is off (or this driver cannot say)."""
    mode, _ = query("nvmlDeviceGetMigMode", handle)
    if mode is None or mode[0] != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return []
    most, reason = query("nvmlDeviceGetMaxMigDeviceCount", handle)
    if most is None:
        unavailable["mig"] = reason or "unknown"
        return []
    out = []
    for i in range(most):
        mig, _ = query("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        if mig is None:
            continue  # an empty slot
        gi, reason = query("nvmlDeviceGetGpuInstanceId", mig)
        if gi is None:
            unavailable[f"mig[{i}]"] = reason or "unknown"
            continue
        uuid, _ = query("nvmlDeviceGetUUID", mig)
        out.append(_Target(index, handle, gi, uuid))
    return out


def _take(target: _Target) -> tuple[Any, str | None]:
    """A new GPM sample of `target`, or (None, the reason); a sample that could not be filled is freed."""
    sample, reason = query("nvmlGpmSampleAlloc")
    if sample is None:
        return None, f"GPM could not allocate a sample: {reason}"
    if target.gpu_instance_id is None:
        _, reason = query("nvmlGpmSampleGet", target.handle, sample)
    else:
        _, reason = query("nvmlGpmMigSampleGet", target.handle, target.gpu_instance_id, sample)
    if reason is not None:
        query("nvmlGpmSampleFree", sample)
        return None, f"GPM could not take a sample: {reason}"
    return sample, None


Figures = tuple[BusyCounters, float | None, str | None, dict[str, str]]  # counters, window, why none, why some are missing


def _sample(pynvml: Any, reader: BusyReader, targets: list[_Target]) -> dict[tuple[int, int | None], Figures]:
    """Each target's counters between its held sample (or one taken now, then `window_s` of waiting) and a new one."""
    out: dict[tuple[int, int | None], Figures] = {}
    fresh = [t for t in targets if t.key not in reader._held]
    for t in fresh:
        sample, reason = _take(t)
        if sample is None:
            out[t.key] = (BusyCounters(), None, reason, {})
        else:
            reader._held[t.key] = (sample, time.monotonic())
    if any(t.key in reader._held for t in fresh):
        time.sleep(max(reader.window_s, _MIN_GAP_S))  # once for every GPU, not once each
    youngest = max((reader._held[t.key][1] for t in targets if t.key in reader._held), default=None)
    if youngest is not None and time.monotonic() - youngest < _MIN_GAP_S:
        time.sleep(_MIN_GAP_S - (time.monotonic() - youngest))  # a watch at --interval 0.1
    for t in targets:
        if t.key in out:
            continue
        first, started = reader._held.pop(t.key)
        second, reason = _take(t)
        now = time.monotonic()
        if second is None:
            out[t.key] = (BusyCounters(), None, reason, {})
            query("nvmlGpmSampleFree", first)
            continue
        counters, missing, reason = _metrics(pynvml, first, second)
        out[t.key] = (counters, round(now - started, 3), reason, missing)
        query("nvmlGpmSampleFree", first)
        if reader.keep:
            reader._held[t.key] = (second, now)
        else:
            query("nvmlGpmSampleFree", second)
    return out


def _metrics(pynvml: Any, first: Any, second: Any) -> tuple[BusyCounters, dict[str, str], str | None]:
    """GPM's counters between two samples: (counters, a reason per counter GPM did not give, why none at all)."""
    fields = [(name, getattr(pynvml, metric, None), scale) for name, (metric, scale) in _METRICS.items()]
    missing = {name: "not in this nvidia-ml-py; upgrade it" for name, metric_id, _ in fields if metric_id is None}
    fields = [f for f in fields if f[1] is not None]
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(fields)
    request.sample1, request.sample2 = first, second
    for i, (_, metric_id, _) in enumerate(fields):
        request.metrics[i].metricId = metric_id
    got, reason = query("nvmlGpmMetricsGet", request)
    if got is None:
        return BusyCounters(), {}, f"GPM could not compute its counters: {reason}"
    values: dict[str, float] = {}
    for i, (name, _, scale) in enumerate(fields):
        metric = got.metrics[i]
        if metric.nvmlReturn != pynvml.NVML_SUCCESS:
            missing[name] = _metric_reason(pynvml, metric.nvmlReturn)
            continue
        value = float(metric.value) * scale
        values[name] = min(max(value, 0.0), 1.0) if scale < 1 else max(value, 0.0)
    return BusyCounters(**values), missing, None


def _metric_reason(pynvml: Any, code: int) -> str:
    if code == getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3):
        return "not counted on this GPU (no such unit or link)"
    try:
        return str(pynvml.NVMLError(code))
    except Exception:  # an error code this pynvml does not know
        return f"NVML error {code}"


def _ratio(percent: Any) -> float | None:
    return min(max(percent / 100, 0.0), 1.0) if isinstance(percent, (int, float)) else None
