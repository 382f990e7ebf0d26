"""NVIDIA GPUs without CUDA: device nodes, PCI functions, NVML, and the CUDA pip wheels.

NVML is reached through pynvml (nvidia-ml-py), imported inside the functions
that need it so `devctl --help` never loads it. A machine without the NVIDIA
driver is a normal state: `nvml_report()` says "unavailable" with the reason.
Nothing here calls cuInit; the CUDA runtime version comes from the wheel's
metadata, not from loading libcudart.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devctl.discovery.pci import (
    PCI_DEVICES,
    class_code,
    hex_id,
    link_name,
    numa_node,
    pci_addresses,
)
from devctl.hostroot import HostRoot
from devctl.model.hardware import (
    CudaWheel,
    Finding,
    GpuProcess,
    NvidiaGpu,
    NvmlReport,
    PciFunction,
)

NVIDIA_PCI_VENDOR_ID = "0x10de"
# jax/_src/hardware_utils.py _NVIDIA_GPU_DEVICES: nvidiactl covers Docker/Kubernetes, dxg WSL2.
_JAX_NVIDIA_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")

# --- device nodes and PCI -------------------------------------------------


def nvidia_device_nodes(root: HostRoot) -> list[str]:
    """The NVIDIA-related nodes present in the root's /dev, GPUs in numeric order first."""
    names = root.listdir("/dev")
    gpus = sorted((n for n in names if re.fullmatch(r"nvidia\d+", n)), key=lambda n: int(n[6:]))
    extra = [n for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "dxg") if n in names]
    # A name is not a node: under a host root a link there may lead out of the tree.
    return [f"/dev/{n}" for n in gpus + extra if root.exists(f"/dev/{n}")]


def has_visible_nvidia_gpu(root: HostRoot) -> bool:
    """JAX's rule: any of /dev/nvidia0, /dev/nvidiactl, /dev/dxg exists."""
    return any(root.exists(p) for p in _JAX_NVIDIA_NODES)


def nvidia_pci_devices(root: HostRoot) -> list[PciFunction]:
    """NVIDIA display/3D controllers on the PCI bus, whether or not a driver is bound.

    A GPU listed here with driver None (or "vfio-pci") and no /dev/nvidia* node
    explains "the GPU is in the machine but CUDA sees nothing".
    """
    out = []
    for address in pci_addresses(root):
        base = f"{PCI_DEVICES}/{address}"
        if hex_id(root, f"{base}/vendor") != NVIDIA_PCI_VENDOR_ID:
            continue
        klass = class_code(root, f"{base}/class")
        # 0x03xxxx is a display controller; skips the GPUs' audio functions and NVSwitches.
        if klass is not None and not klass.startswith("0x03"):
            continue
        out.append(
            PciFunction(
                address=address.lower(),
                vendor_id=NVIDIA_PCI_VENDOR_ID,
                device_id=hex_id(root, f"{base}/device") or "",
                class_code=klass,
                driver=link_name(root, f"{base}/driver"),
                numa_node=numa_node(root, base),
            )
        )
    return sorted(out, key=lambda f: f.address)


_BUS_ID_RE = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")


def normalize_pci_bus_id(bus_id: str | bytes | None) -> str | None:
    """'00000000:3B:00.0' (NVML), '0000:3b:00.0' (sysfs) or '3b:00.0' -> '0000:3b:00.0'; None if unparsable."""
    if bus_id is None:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    m = _BUS_ID_RE.fullmatch(bus_id.strip().strip("\0").lower())
    if not m:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


# --- NVML -----------------------------------------------------------------

_NVML_LOCK = threading.Lock()  # nvmlInit/nvmlShutdown are refcounted; keep a report's pair together


@contextlib.contextmanager
def nvml_session():
    """Keep NVML initialized across several reports: a watch loop then pays the driver's init once, not every sample.

    nvmlInit is reference-counted, so each report's own init and shutdown inside the session are cheap.
    """
    try:
        if _nvml_library_absent():
            raise OSError(_NO_LIBRARY)
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver: each report will say why
        pynvml = None
    try:
        yield
    finally:
        if pynvml is not None:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass


class NvmlUnavailable(Exception):
    """NVML cannot be used here: `status` is "unavailable" (no library or driver, a normal state) or "error"."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@contextlib.contextmanager
def nvml_initialized():
    """Yield the pynvml module with NVML initialized, shut down again afterwards; raise NvmlUnavailable if it cannot be."""
    if _nvml_library_absent():
        raise NvmlUnavailable("unavailable", _NO_LIBRARY)
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable("unavailable", f"nvidia-ml-py is not installed ({e})") from None
    if not callable(getattr(pynvml, "nvmlInit", None)):
        # Another package named pynvml can shadow nvidia-ml-py (nvitop checks the same thing).
        raise NvmlUnavailable("error", f"the pynvml module at {getattr(pynvml, '__file__', '?')} is not nvidia-ml-py")
    with _NVML_LOCK:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            status = "unavailable" if _is_absent_driver(pynvml, e) else "error"
            raise NvmlUnavailable(status, _init_reason(pynvml, e)) from None
        try:
            yield pynvml
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass


def nvml_report(*, processes: bool = False) -> NvmlReport:
    """Driver and per-GPU facts from NVML; never raises for a missing library or driver.

    With `processes`, every process using each GPU, as NVML reports it.
    """
    try:
        with nvml_initialized() as pynvml:
            return _report(pynvml, processes)
    except NvmlUnavailable as e:
        return _without_nvml(e.status, e.reason)


def _without_nvml(status: str, reason: str) -> NvmlReport:
    return NvmlReport(status, reason, None, None, None, (), {"nvml": reason})


_NVML_LIBRARY = "libnvidia-ml.so.1"  # what pynvml loads on Linux
_NO_LIBRARY = f"{_NVML_LIBRARY} not found: no NVIDIA driver installed, or not mounted into this container"


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


def _is_absent_driver(pynvml: Any, e: Exception) -> bool:
    return isinstance(e, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded))


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


def query(fn: Callable[..., Any] | str, *args: Any) -> tuple[Any, str | None]:
    """(value, None) or (None, reason). The one place NVML errors become reasons."""
    import pynvml

    if isinstance(fn, str):
        name = fn
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
    """Collects the reason for every field a GPU could not report."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def get(self, field: str, fn: Callable[..., Any] | str, *args: Any) -> Any:
        value, reason = query(fn, *args)
        if reason is not None:
            self.unavailable[field] = reason
        return value


def _report(pynvml: Any, processes: bool = False) -> NvmlReport:
    top = _Fields()
    driver = top.get("driver_version", pynvml.nvmlSystemGetDriverVersion)
    cuda, reason = query("nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda, reason = query("nvmlSystemGetCudaDriverVersion")
    if cuda is None:
        top.unavailable["cuda_driver_version"] = reason or "unknown"
    count = top.get("gpus", pynvml.nvmlDeviceGetCount)
    gpus = tuple(_gpu(pynvml, i) for i in range(count or 0))
    procs: tuple[GpuProcess, ...] = ()
    if processes:
        procs = tuple(p for g in gpus for p in _gpu_processes(pynvml, g, top))
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


def _gpu_processes(pynvml: Any, gpu: NvidiaGpu, top: _Fields) -> list[GpuProcess]:
    """Compute and graphics processes on one GPU, each with its user and command when its pid is ours to see."""
    handle, reason = query(pynvml.nvmlDeviceGetHandleByIndex, gpu.index)
    if handle is None:
        top.unavailable[f"processes[{gpu.index}]"] = reason or "unknown"
        return []
    out: dict[int, GpuProcess] = {}
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"), ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        infos, reason = query(fn, handle)
        if infos is None:
            top.unavailable[f"processes[{gpu.index}].{kind}"] = reason or "unknown"
            continue
        for info in infos:
            if info.pid in out:
                continue
            used = getattr(info, "usedGpuMemory", None)
            # NVML_VALUE_NOT_AVAILABLE (ULL max) when the driver cannot attribute memory (e.g. inside some containers).
            used = None if used is None or used >= (1 << 63) else int(used)
            out[info.pid] = _process(gpu, info.pid, used, kind)
    return list(out.values())


def _process(gpu: NvidiaGpu, pid: int, used: int | None, kind: str) -> GpuProcess:
    from devctl.discovery.procs import fd_targets, process_ref

    root = HostRoot("/")
    # NVML reports pids of the host's pid namespace. Inside a container such a pid points nowhere, or at an
    # unrelated process of the container: trust it only if that process has an NVIDIA device open.
    try:
        targets = fd_targets(root, pid)
    except ProcessLookupError:
        targets = []
    if not root.exists(f"/proc/{pid}") or (targets is not None and not any(t.startswith("/dev/nvidia") for t in targets)):
        return GpuProcess(gpu.index, gpu.uuid, pid, used, kind, None, None, False)
    ref = process_ref(root, pid)
    return GpuProcess(gpu.index, gpu.uuid, pid, used, kind, ref.user, ref.command, True)


def format_cuda_version(version: int | None) -> str | None:
    """12040 -> '12.4' (CUDA encodes major*1000 + minor*10)."""
    if version is None:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _gpu(pynvml: Any, index: int) -> NvidiaGpu:
    f = _Fields()
    handle = f.get("handle", pynvml.nvmlDeviceGetHandleByIndex, index)
    if handle is None:
        return _lost_gpu(index, f.unavailable["handle"])

    memory = f.get("memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is None:
        for name in ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes"):
            f.unavailable[name] = f.unavailable["memory"]
        del f.unavailable["memory"]
    pci = f.get("pci_bus_id", pynvml.nvmlDeviceGetPciInfo, handle)
    power_mw = f.get("power_draw_w", pynvml.nvmlDeviceGetPowerUsage, handle)
    limit_mw = f.get("power_limit_w", pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    cc = f.get("compute_capability", pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    return NvidiaGpu(
        index=index,
        name=f.get("name", pynvml.nvmlDeviceGetName, handle),
        uuid=f.get("uuid", pynvml.nvmlDeviceGetUUID, handle),
        pci_bus_id=normalize_pci_bus_id(pci.busId) if pci is not None else None,
        memory_total_bytes=memory.total if memory is not None else None,
        memory_used_bytes=memory.used if memory is not None else None,
        memory_free_bytes=memory.free if memory is not None else None,
        compute_capability=tuple(cc) if cc is not None else None,
        pcie_link_gen_current=f.get("pcie_link_gen_current", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_link_gen_max=f.get("pcie_link_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_link_gen_gpu_max=f.get("pcie_link_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        pcie_link_width_current=f.get("pcie_link_width_current", "nvmlDeviceGetCurrPcieLinkWidth", handle),
        pcie_link_width_max=f.get("pcie_link_width_max", "nvmlDeviceGetMaxPcieLinkWidth", handle),
        power_draw_w=power_mw / 1000 if power_mw is not None else None,
        power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
        temperature_c=f.get("temperature_c", pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        unavailable=f.unavailable,
    )


def _lost_gpu(index: int, reason: str) -> NvidiaGpu:
    fields = (
        "name uuid pci_bus_id memory_total_bytes memory_used_bytes memory_free_bytes compute_capability "
        "pcie_link_gen_current pcie_link_gen_max pcie_link_gen_gpu_max pcie_link_width_current "
        "pcie_link_width_max power_draw_w power_limit_w temperature_c"
    ).split()
    return NvidiaGpu(index, *([None] * len(fields)), unavailable={name: reason for name in fields})


# --- CUDA wheels ----------------------------------------------------------

Version = tuple[int, ...]

# JAX's own floors (jax_plugins/cuda/__init__.py _check_cuda_versions, jax-internals.md §3.1),
# as (version prefix, where it comes from). cuDNN and cuFFT floors are "what JAX was built
# against", known only from the installed plugin's requirements.
_JAX_MINIMUMS: dict[str, tuple[Version, str]] = {
    "cuda_runtime": ((12, 1), "JAX's CUDA runtime minimum 12010"),
    "cublas": ((12, 1), "JAX's cuBLAS minimum 120100"),
    "cusparse": ((12, 1), "JAX's cuSPARSE minimum 12100"),
    # JAX asks for cuPTI API version 18, which CUDA 12.0 introduced (mapping unverified).
    "cupti": ((12, 0), "JAX's cuPTI API minimum 18 (CUDA 12.0)"),
}
# Distributions that carry JAX's declared nvidia-* requirements.
_JAX_CUDA_DISTS = re.compile(r"jax-cuda\d+-(?:plugin|pjrt)|jaxlib|jax")
# Components whose own version major is the CUDA major (cuFFT, cuDNN, NCCL number differently).
_VERSION_IS_CUDA = {"cuda_runtime", "cublas", "cupti", "nvcc", "nvrtc", "nvjitlink"}
_NOT_CUDA = {"nvidia-ml-py", "nvidia-ml-py3"}  # NVML bindings, not CUDA libraries
_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?\s*([^;()]*)\)?\s*(?:;(.*))?$")
_SPEC_RE = re.compile(r"(>=|<=|==|~=|!=|<|>)\s*([0-9][\w.+!*-]*)")


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _component(dist_name: str) -> tuple[str, int | None]:
    """'nvidia-cuda-runtime-cu12' -> ('cuda_runtime', 12); 'nvidia-cublas' -> ('cublas', None)."""
    base = dist_name[len("nvidia-") :]
    m = re.search(r"-cu(\d+)$", base)
    if m:
        base = base[: m.start()]
    base = re.sub(r"^cuda-(?!runtime)", "", base)  # nvidia-cuda-cupti -> cupti; keep cuda_runtime
    return base.replace("-", "_"), int(m.group(1)) if m else None


def parse_version(text: str | None) -> Version | None:
    """The leading numeric release of a version string: '12.4.127' -> (12, 4, 127), '13.0.0rc1' -> (13, 0, 0)."""
    m = re.match(r"\s*(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _at_least(version: Version, floor: Version) -> bool:
    width = max(len(version), len(floor))
    return version + (0,) * (width - len(version)) >= floor + (0,) * (width - len(floor))


def _distributions(paths: list[str] | None) -> list[importlib.metadata.Distribution]:
    dists = importlib.metadata.distributions(path=paths) if paths is not None else importlib.metadata.distributions()
    seen: dict[str, importlib.metadata.Distribution] = {}
    for dist in dists:
        name = _normalize(dist.metadata.get("Name") or "")
        seen.setdefault(name, dist)  # first on the path wins, as for imports
    return [seen[name] for name in sorted(seen) if name]


@dataclass(frozen=True)
class _Bounds:
    floor: Version | None
    ceiling: Version | None  # exclusive, from "<"
    source: str


def _declared_bounds(dists: Iterable[importlib.metadata.Distribution]) -> dict[str, _Bounds]:
    """{nvidia dist: bounds} from the Requires-Dist of installed JAX packages."""
    out: dict[str, _Bounds] = {}
    for dist in dists:
        owner = _normalize(dist.metadata.get("Name") or "")
        if not _JAX_CUDA_DISTS.fullmatch(owner):
            continue
        for req in dist.requires or []:
            m = _REQ_RE.match(req)
            if not m or not _normalize(m.group(1)).startswith("nvidia-"):
                continue
            bounds = _bounds(m.group(2), f"{owner} {dist.version}")
            target = _normalize(m.group(1))
            if bounds is not None and _binds_tighter(bounds, out.get(target)):
                out[target] = bounds
    return out


def _bounds(specifiers: str, owner: str) -> _Bounds | None:
    floor = ceiling = None
    for op, ver in _SPEC_RE.findall(specifiers):
        if op in (">=", "~=", "==", ">"):
            floor = parse_version(ver)
        elif op == "<":
            ceiling = parse_version(ver)
    if floor is None and ceiling is None:
        return None
    return _Bounds(floor, ceiling, f"{owner} requires {specifiers.strip().replace(' ', '')}")


def _binds_tighter(new: _Bounds, old: _Bounds | None) -> bool:
    # Several JAX packages (and extras) may pin the same wheel: the highest floor binds.
    if old is None or old.floor is None:
        return True
    return new.floor is not None and not _at_least(old.floor, new.floor)


def cuda_wheels(paths: list[str] | None = None) -> list[CudaWheel]:
    """Installed nvidia-* CUDA distributions, each checked against what JAX accepts.

    `paths` replaces sys.path for the search (tests point it at a fake site directory).
    """
    dists = _distributions(paths)
    declared = _declared_bounds(dists)
    wheels = []
    for dist in dists:
        name = _normalize(dist.metadata.get("Name") or "")
        if not name.startswith("nvidia-") or name in _NOT_CUDA:
            continue
        wheels.append(_wheel(dist, name, declared.get(name)))
    return wheels


def _wheel(dist: importlib.metadata.Distribution, name: str, declared: _Bounds | None) -> CudaWheel:
    component, suffix_major = _component(name)
    version = dist.version
    parsed = parse_version(version)
    floor, source = _JAX_MINIMUMS.get(component, (None, None))
    ceiling = None
    if declared is not None:
        ceiling = declared.ceiling
        if declared.floor is not None and (floor is None or _at_least(declared.floor, floor)):
            floor, source = declared.floor, declared.source
        elif ceiling is not None:
            source = f"{source}; {declared.source}" if source else declared.source

    if floor is None and ceiling is None:
        verdict = "not checked"
    elif parsed is None:
        verdict = "unknown"
    elif floor is not None and not _at_least(parsed, floor):
        verdict = "too old"
    elif ceiling is not None and _at_least(parsed, ceiling):
        verdict = "too new"
    else:
        verdict = "ok"

    # cu13 wheels drop the suffix; their version's major is the CUDA major for toolkit parts.
    cuda_major = suffix_major
    if cuda_major is None and component in _VERSION_IS_CUDA and parsed:
        cuda_major = parsed[0]
    location = None
    try:
        location = str(dist.locate_file(""))
    except Exception:  # locate_file is optional on custom finders
        pass
    return CudaWheel(
        distribution=dist.metadata.get("Name") or name,
        version=version,
        component=component,
        cuda_major=cuda_major,
        minimum=".".join(map(str, floor)) if floor else None,
        minimum_source=source if (floor or ceiling) else None,
        verdict=verdict,
        location=location,
    )


def cuda_runtime_version(wheels: Iterable[CudaWheel]) -> str | None:
    """The newest installed CUDA runtime wheel's version, e.g. '12.4.127'."""
    runtimes = [w for w in wheels if w.component == "cuda_runtime" and parse_version(w.version)]
    if not runtimes:
        return None
    return max(runtimes, key=lambda w: parse_version(w.version)).version


def check_driver_vs_runtime(driver_cuda_version: int | None, runtime_version: str | None) -> Finding | None:
    """A finding when the driver supports an older CUDA than the runtime wheel; None when fine or unknown.

    Same-major gaps often still run (CUDA minor-version compatibility) but break
    PTX JIT and slow compilation (failure-modes.md #11), so they are warnings.
    """
    runtime = parse_version(runtime_version)
    if driver_cuda_version is None or runtime is None:
        return None
    driver = (driver_cuda_version // 1000, driver_cuda_version % 1000 // 10)
    wanted = (runtime + (0,))[:2]
    if driver >= wanted:
        return None
    driver_text, wanted_text = f"{driver[0]}.{driver[1]}", f"{wanted[0]}.{wanted[1]}"
    hint = (
        "update the NVIDIA driver (>= 525 for CUDA 12, >= 580 for CUDA 13), "
        "or install CUDA wheels no newer than the driver"
    )
    if driver[0] < wanted[0]:
        return Finding(
            code="cuda-driver-too-old",
            severity="error",
            message=(
                f"the NVIDIA driver supports CUDA {driver_text}, "
                f"older than the CUDA {wanted_text} runtime wheel ({runtime_version})"
            ),
            hint=hint,
        )
    return Finding(
        code="cuda-driver-older-than-runtime",
        severity="warning",
        message=(
            f"the NVIDIA driver supports CUDA {driver_text}, older than the CUDA {wanted_text} runtime wheel "
            f"({runtime_version}); minor-version compatibility may run it, but PTX from newer ptxas fails to load"
        ),
        hint=hint,
    )
