"""Every read of NVML, the NVIDIA driver's own view: GPUs, their processes, PCIe links and health counters.

NVML is reached through pynvml (nvidia-ml-py), imported inside the functions
that need it so `devctl --help` never loads it. Each reader initializes NVML
and shuts it down again (`nvml_initialized`), and every call goes through
`query`, the one place an NVML error becomes a reason. A machine without the
NVIDIA driver is a normal state: each reader says "unavailable" with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from devctl.discovery.pci import normalize_pci_bus_id
from devctl.discovery.procs import fd_targets, process_ref
from devctl.hostroot import HostRoot
from devctl.model.hardware import (
    GpuHealth,
    GpuPcieLink,
    GpuProcess,
    NvidiaGpu,
    NvmlHealth,
    NvmlReport,
)

_NVML_LOCK = threading.Lock()  # nvmlInit/nvmlShutdown are refcounted; keep a report's pair together
_NVML_LIBRARY = "libnvidia-ml.so.1"  # what pynvml loads on Linux
_NO_LIBRARY = f"{_NVML_LIBRARY} not found: no NVIDIA driver installed, or not mounted into this container"
_NOT_ON_HOST_ROOT = "not read under --host-root: NVML talks to this machine's driver"
# NVML clock-event bits that mean "slowed down by heat or power"; idle, sync boost and
# application/display clock settings are not problems.
_THROTTLE_BITS = (
    ("nvmlClocksEventReasonSwPowerCap", "sw_power_cap"),
    ("nvmlClocksEventReasonHwSlowdown", "hw_slowdown"),
    ("nvmlClocksEventReasonSwThermalSlowdown", "sw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwThermalSlowdown", "hw_thermal_slowdown"),
    ("nvmlClocksEventReasonHwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
)

# --- the one door: loading, init/shutdown, queries ---------------------------


class NvmlUnavailable(Exception):
    """NVML cannot be used here: `status` is "unavailable" (no library or driver, a normal state) or "error"."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@contextlib.contextmanager
def nvml_initialized() -> Iterator[Any]:
    """Yield the pynvml module with NVML initialized, shut down again afterwards; raise NvmlUnavailable if it cannot be."""
    pynvml = _load()
    with _NVML_LOCK, _initialized(pynvml):
        yield pynvml


@contextlib.contextmanager
def nvml_session() -> Iterator[None]:
    """Keep NVML initialized across several reads: a watch loop or a benchmark then pays the driver's init once.

    nvmlInit is reference-counted, so each read's own init and shutdown inside the session are cheap.
    No lock is held: reads inside the session take it themselves.
    """
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(_initialized(_load()))
        except NvmlUnavailable:
            pass  # no library, no driver: each read inside will say why
        yield


def _load() -> Any:
    """The pynvml module, or NvmlUnavailable saying why it cannot serve."""
    if _nvml_library_absent():
        raise NvmlUnavailable("unavailable", _NO_LIBRARY)
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable("unavailable", f"nvidia-ml-py is not installed ({e})") from None
    if not callable(getattr(pynvml, "nvmlInit", None)):
        # Another package named pynvml can shadow nvidia-ml-py (nvitop checks the same thing).
        raise NvmlUnavailable("error", f"the pynvml module at {getattr(pynvml, '__file__', '?')} is not nvidia-ml-py")
    return pynvml


@contextlib.contextmanager
def _initialized(pynvml: Any) -> Iterator[Any]:
    """nvmlInit, and its nvmlShutdown however the body ends."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        status = "unavailable" if isinstance(e, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded)) else "error"
        raise NvmlUnavailable(status, _init_reason(pynvml, e)) from None
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _nvml_library_absent() -> bool:
    """Whether the dynamic loader cannot find NVML; then importing pynvml (40 ms) could only say the same."""
    if "pynvml" in sys.modules or not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        ctypes.CDLL(_NVML_LIBRARY)  # stays loaded for pynvml, as its own load would
    except OSError:
        return True
    return False


def _init_reason(pynvml: Any, e: Exception) -> str:
    if isinstance(e, pynvml.NVMLError_LibraryNotFound):
        return _NO_LIBRARY
    if isinstance(e, pynvml.NVMLError_DriverNotLoaded):
        return "the NVIDIA kernel driver is not loaded"
    if isinstance(e, pynvml.NVMLError_NoPermission):
        return "no permission to open the NVIDIA device nodes (/dev/nvidia*)"
    if isinstance(e, pynvml.NVMLError_LibRmVersionMismatch):
        return "NVML library and kernel driver versions differ (driver upgraded without a reboot?)"
    return f"NVML initialization failed: {e}"


def query(name: str, *args: Any) -> tuple[Any, str | None]:
    """(value, None) or (None, reason): pynvml's function `name` called with `args`. The one place NVML errors become reasons.

    The function is looked up by name at each call, so a binding too old to have it is a reason, not a crash.
    """
    import pynvml

    fn = getattr(pynvml, name, None)
    if fn is None:
        return None, f"{name} is not in this nvidia-ml-py; upgrade it"
    try:
        value = fn(*args)
    except pynvml.NVMLError as e:
        return None, _query_reason(pynvml, e)
    except UnicodeDecodeError:
        return None, "NVML returned text that is not UTF-8"
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value, None


def _query_reason(pynvml: Any, e: Exception) -> str:
    if isinstance(e, pynvml.NVMLError_NotSupported):
        return "not supported by this GPU or driver"
    if isinstance(e, pynvml.NVMLError_FunctionNotFound):
        return "the driver's NVML lacks this function (driver older than nvidia-ml-py)"
    if isinstance(e, pynvml.NVMLError_GpuIsLost):
        return "GPU is lost (fell off the bus; see Xid 79 in dmesg)"
    if isinstance(e, pynvml.NVMLError_NoPermission):
        return "no permission"
    return str(e)


class _Fields:
    """Queries one record's fields, keeping the reason for every field that could not be read."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def get(self, field: str, name: str, *args: Any) -> Any:
        value, reason = query(name, *args)
        if reason is not None:
            self.unavailable[field] = reason
        return value

    def pci_bus_id(self, handle: Any) -> str | None:
        pci = self.get("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
        return normalize_pci_bus_id(pci.busId) if pci is not None else None

    def pcie_link(self, handle: Any) -> dict[str, int | None]:
        """The pcie_link_* fields NvidiaGpu and GpuPcieLink share."""
        return {
            "pcie_link_gen_current": self.get("pcie_link_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
            "pcie_link_gen_max": self.get("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
            "pcie_link_gen_gpu_max": self.get("pcie_link_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
            "pcie_link_width_current": self.get("pcie_link_width_current", "nvmlDeviceGetCurrPcieLinkWidth", handle),
            "pcie_link_width_max": self.get("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth", handle),
        }


def format_cuda_version(version: int | None) -> str | None:
    """12040 -> '12.4' (CUDA encodes major*1000 + minor*10)."""
    if version is None:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


# --- the driver and its GPUs: list, env, memstats ---------------------------------


def nvml_report(*, processes: bool = False) -> NvmlReport:
    """Driver and per-GPU facts from NVML; never raises for a missing library or driver.

    With `processes`, every process using each GPU, as NVML reports it.
    """
    try:
        with nvml_initialized() as pynvml:
            return _report(pynvml, processes)
    except NvmlUnavailable as e:
        return NvmlReport(e.status, e.reason, None, None, None, (), {"nvml": e.reason})


def _report(pynvml: Any, processes: bool) -> NvmlReport:
    top = _Fields()
    driver = top.get("driver_version", "nvmlSystemGetDriverVersion")
    cuda, reason = query("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda, reason = query("nvmlSystemGetCudaDriverVersion")
    if cuda is None:
        top.unavailable["cuda_driver_version"] = reason or "unknown"
    count = top.get("gpus", "nvmlDeviceGetCount")
    gpus = tuple(_gpu(pynvml, i) for i in range(count or 0))
    procs: tuple[GpuProcess, ...] = ()
    if processes:
        procs = tuple(p for g in gpus for p in _processes_of(top, g))
    return NvmlReport(
        status="ok",
        reason=None,
        driver_version=driver,
        cuda_driver_version=cuda,
        cuda_driver_version_str=format_cuda_version(cuda),
        gpus=gpus,
        unavailable=top.unavailable,
        processes=procs,
    )


def _gpu(pynvml: Any, index: int) -> NvidiaGpu:
    f = _Fields()
    handle = f.get("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return _lost_gpu(index, f.unavailable["handle"])
    memory = f.get("memory", "nvmlDeviceGetMemoryInfo", handle)
    if memory is None:
        for name in ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes"):
            f.unavailable[name] = f.unavailable["memory"]
        del f.unavailable["memory"]
    pci_bus_id = f.pci_bus_id(handle)
    power_mw = f.get("power_draw_w", "nvmlDeviceGetPowerUsage", handle)
    limit_mw = f.get("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    cc = f.get("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    return NvidiaGpu(
        index=index,
        name=f.get("name", "nvmlDeviceGetName", handle),
        uuid=f.get("uuid", "nvmlDeviceGetUUID", handle),
        pci_bus_id=pci_bus_id,
        memory_total_bytes=memory.total if memory is not None else None,
        memory_used_bytes=memory.used if memory is not None else None,
        memory_free_bytes=memory.free if memory is not None else None,
        compute_capability=tuple(cc) if cc is not None else None,
        **f.pcie_link(handle),
        power_draw_w=power_mw / 1000 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        temperature_c=f.get("temperature_c", "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU),
        unavailable=f.unavailable,
    )


def _lost_gpu(index: int, reason: str) -> NvidiaGpu:
    """A GPU NVML counts but cannot open: every field unknown, for the same reason."""
    fields = [f.name for f in dataclasses.fields(NvidiaGpu) if f.name not in ("index", "unavailable")]
    return NvidiaGpu(index, **dict.fromkeys(fields), unavailable=dict.fromkeys(fields, reason))


def _processes_of(top: _Fields, gpu: NvidiaGpu) -> list[GpuProcess]:
    handle, reason = query("nvmlDeviceGetHandleByIndex", gpu.index)
    if handle is None:
        top.unavailable[f"processes[{gpu.index}]"] = reason or "unknown"
        return []
    kinds = {"compute": f"processes[{gpu.index}].compute", "graphics": f"processes[{gpu.index}].graphics"}
    return _running_processes(top, handle, gpu.index, gpu.uuid, kinds)


_PROCESS_QUERIES = {"compute": "nvmlDeviceGetComputeRunningProcesses", "graphics": "nvmlDeviceGetGraphicsRunningProcesses"}


def _running_processes(f: _Fields, handle: Any, index: int, uuid: str | None, kinds: Mapping[str, str]) -> list[GpuProcess]:
    """The processes of each of `kinds` ({"compute"|"graphics": the field a failure is recorded under}) on one GPU,
    each with its user and command when its pid is ours to see; a pid of both kinds is listed once."""
    out: dict[int, GpuProcess] = {}
    for kind, field in kinds.items():
        infos = f.get(field, _PROCESS_QUERIES[kind], handle)
        for info in infos or ():
            if info.pid not in out:
                used = getattr(info, "usedGpuMemory", None)
                # NVML_VALUE_NOT_AVAILABLE (ULL max) when the driver cannot attribute memory (e.g. inside some containers).
                used = None if used is None or used >= (1 << 63) else int(used)
                out[info.pid] = _process(index, uuid, info.pid, used, kind)
    return list(out.values())


def _process(index: int, uuid: str | None, pid: int, used: int | None, kind: str) -> GpuProcess:
    root = HostRoot("/")
    # NVML reports pids of the host's pid namespace. Inside a container such a pid points nowhere, or at an
    # unrelated process of the container: trust it only if that process has an NVIDIA device open.
    try:
        targets = fd_targets(root, pid)
    except ProcessLookupError:
        targets = []
    if not root.exists(f"/proc/{pid}") or (targets is not None and not any(t.startswith("/dev/nvidia") for t in targets)):
        return GpuProcess(index, uuid, pid, used, kind, None, None, False)
    ref = process_ref(root, pid)
    return GpuProcess(index, uuid, pid, used, kind, ref.user, ref.command, True)


# --- the health counters: check and doctor -------------------------------------------


def nvml_health(root: HostRoot) -> NvmlHealth:
    """Health counters of every GPU NVML sees; never raises for a missing driver."""
    if not root.is_real:
        return NvmlHealth("unavailable", _NOT_ON_HOST_ROOT, ())
    try:
        with nvml_initialized() as pynvml:
            count, reason = query("nvmlDeviceGetCount")
            if count is None:
                return NvmlHealth("error", f"NVML could not count the GPUs: {reason}", ())
            return NvmlHealth("ok", None, tuple(_gpu_health(pynvml, i) for i in range(count)))
    except NvmlUnavailable as e:
        return NvmlHealth(e.status, e.reason, ())


def _gpu_health(pynvml: Any, index: int) -> GpuHealth:
    f = _Fields()
    handle = f.get("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuHealth(index, None, None, None, None, None, None, None, None, None, (), None, None, None, None, (), f.unavailable)
    unc = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    volatile = f.get("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors", handle, unc, pynvml.NVML_VOLATILE_ECC)
    aggregate = f.get("ecc_uncorrected_aggregate", "nvmlDeviceGetTotalEccErrors", handle, unc, pynvml.NVML_AGGREGATE_ECC)
    dbe_pages = f.get(
        "retired_pages_double_bit", "nvmlDeviceGetRetiredPages", handle, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = f.get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    remap = f.get("remapped_rows", "nvmlDeviceGetRemappedRows", handle)  # (correctable, uncorrectable, pending, failed)
    reasons = f.get("throttle_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers older than the "clocks event" rename
        f.unavailable.pop("throttle_reasons", None)
        reasons = f.get("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    memory = f.get("memory", "nvmlDeviceGetMemoryInfo", handle)
    pci_bus_id = f.pci_bus_id(handle)
    # For the processes' records only: GpuHealth has no uuid field, so a missing one is no reason to list here.
    uuid, _ = query("nvmlDeviceGetUUID", handle)
    processes = tuple(_running_processes(f, handle, index, uuid, {"compute": "processes"}))
    return GpuHealth(
        index=index,
        name=f.get("name", "nvmlDeviceGetName", handle),
        pci_bus_id=pci_bus_id,
        ecc_uncorrected_volatile=volatile,
        ecc_uncorrected_aggregate=aggregate,
        retired_pages_double_bit=len(dbe_pages) if dbe_pages is not None else None,
        retired_pages_pending=(pending == pynvml.NVML_FEATURE_ENABLED) if pending is not None else None,
        remapped_rows_uncorrectable=remap[1] if remap is not None else None,
        remap_pending=bool(remap[2]) if remap is not None else None,
        remap_failed=bool(remap[3]) if remap is not None else None,
        throttle_reasons=tuple(name for attr, name in _THROTTLE_BITS if reasons and reasons & getattr(pynvml, attr, 0)),
        temperature_c=f.get("temperature_c", "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU),
        slowdown_threshold_c=f.get(
            "slowdown_threshold_c", "nvmlDeviceGetTemperatureThreshold", handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        memory_total_bytes=memory.total if memory is not None else None,
        memory_used_bytes=memory.used if memory is not None else None,
        processes=processes,
        unavailable=f.unavailable,
    )


# --- PCIe links: bench transfer's roof ---------------------------------------------


def pcie_links(gpus: Sequence[str | int]) -> tuple[list[GpuPcieLink], str | None]:
    """The PCIe link of each GPU, named by PCI bus id (str) or NVML index (int), in order; with NVML unavailable,
    no links and the reason. Maximum and current generation and width are read together: a link trains down when
    idle, so a caller samples it right after a transfer (inside `nvml_session`, that costs no init)."""
    try:
        with nvml_initialized():
            return [_pcie_link(gpu) for gpu in gpus], None
    except NvmlUnavailable as e:
        return [], e.reason


def _pcie_link(gpu: str | int) -> GpuPcieLink:
    f = _Fields()
    by = "nvmlDeviceGetHandleByIndex" if isinstance(gpu, int) else "nvmlDeviceGetHandleByPciBusId"
    handle = f.get("handle", by, gpu)
    if handle is None:
        return GpuPcieLink(gpu, None, None, None, None, None, None, f.unavailable)
    return GpuPcieLink(gpu=gpu, pci_bus_id=f.pci_bus_id(handle), **f.pcie_link(handle), unavailable=f.unavailable)


# --- utilization: the exporter ---------------------------------------------------------


def utilization() -> dict[int, tuple[float | None, float | None]]:
    """Per GPU index, the share of the last sample period (1/6 s to 1 s, by product) in which a kernel ran and in
    which device memory was read or written, as ratios; None where the GPU does not say. {} without NVML."""
    try:
        with nvml_initialized():
            count, _ = query("nvmlDeviceGetCount")
            out: dict[int, tuple[float | None, float | None]] = {}
            for index in range(count or 0):
                handle, _ = query("nvmlDeviceGetHandleByIndex", index)
                rates, _ = query("nvmlDeviceGetUtilizationRates", handle) if handle is not None else (None, None)
                out[index] = (rates.gpu / 100, rates.memory / 100) if rates is not None else (None, None)
            return out
    except NvmlUnavailable:
        return {}
