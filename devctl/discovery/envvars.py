"""The environment variables that change what JAX sees or how it uses a device, explained per value."""

from __future__ import annotations

import os
from typing import Callable, Mapping

from devctl.errors import UsageError
from devctl.model.environment import EnvVar

KNOWN_PLATFORM_NAMES = ("cpu", "cuda", "rocm", "tpu", "gpu", "metal", "oneapi", "sycl", "xpu", "proxy", "interpreter")
ALLOCATORS = ("default", "platform", "bfc", "cuda_async", "vmm", "address")
_FALSE = ("false", "False", "0")


def _platforms(v: str) -> tuple[str, str | None]:
    names = [n.strip() for n in v.split(",") if n.strip()]
    unknown = [n for n in names if n.lower() not in KNOWN_PLATFORM_NAMES]
    problem = f"unknown platform name(s) {', '.join(unknown)}: JAX will fail to start them" if unknown else None
    if not names:
        return "empty: JAX chooses backends by priority", None
    return f"only {', '.join(names)}; {names[0]} is the default, and every listed platform must initialize or JAX raises", problem


def _preallocate(v: str) -> tuple[str, str | None]:
    if v in _FALSE:
        return "no GPU preallocation: memory is allocated on demand (more fragmentation, less held)", None
    return "GPU preallocation on (any value but false/0): JAX takes 75% of GPU memory, or MEM_FRACTION, at start", None


def _fraction(v: str) -> tuple[str, str | None]:
    try:
        f = float(v)
    except ValueError:
        return "not a number", f"{v!r} is not a number; JAX raises at GPU client creation"
    if not 0 < f <= 1:
        return f"fraction {f:g}", f"{f:g} is outside (0, 1]"
    return f"JAX preallocates {f:.0%} of each GPU's memory", None


def _allocator(v: str) -> tuple[str, str | None]:
    meanings = {
        "platform": "allocate exactly what is needed and free on release (slow, no fragmentation; memory_stats may be None)",
        "bfc": "JAX's BFC pool allocator (the default)",
        "default": "JAX's default allocator (BFC)",
        "cuda_async": "CUDA's stream-ordered allocator (cudaMallocAsync)",
        "vmm": "virtual-memory-management allocator",
        "address": "address allocator",
    }
    if v not in ALLOCATORS:
        return "unsupported", f"must be one of {', '.join(ALLOCATORS)}; JAX raises ValueError at GPU client creation"
    return meanings[v], None


def _tpu_library_path(v: str) -> tuple[str, str | None]:
    if not os.path.exists(v):
        return "libtpu to load", f"{v} does not exist; JAX warns and falls back to the libtpu package"
    return "libtpu to load instead of the libtpu package's", None


def _cuda_visible(v: str) -> tuple[str, str | None]:
    if v.strip() in ("", "-1", "none", "NoDevFiles"):
        return "hides every GPU from CUDA", None
    return f"CUDA sees only GPU(s) {v}, renumbered from 0", None


def _const(meaning: str, problem: str | None = None) -> Callable[[str], tuple[str, str | None]]:
    return lambda _v: (meaning, problem)


_EXPLAIN: dict[str, Callable[[str], tuple[str, str | None]]] = {
    "JAX_PLATFORMS": _platforms,
    "JAX_PLATFORM_NAME": _const("deprecated single-platform selector", "deprecated: use JAX_PLATFORMS"),
    "JAX_BACKEND_TARGET": _const("remote backend address (IFRT proxy / Pathways)"),
    "PJRT_NAMES_AND_LIBRARY_PATHS": _const("extra PJRT plugins name:path[,...] (see devctl plugins)"),
    "JAX_CUDA_VISIBLE_DEVICES": _const(
        "nothing: JAX never reads this variable",
        "has no effect; use CUDA_VISIBLE_DEVICES, JAX_LOCAL_DEVICE_IDS or jax.config.update('jax_cuda_visible_devices', ...)",
    ),
    "CUDA_VISIBLE_DEVICES": _cuda_visible,
    "HIP_VISIBLE_DEVICES": _cuda_visible,
    "ROCR_VISIBLE_DEVICES": _cuda_visible,
    "CUDA_DEVICE_ORDER": _const("CUDA device numbering order (PCI_BUS_ID matches nvidia-smi)"),
    "JAX_LOCAL_DEVICE_IDS": _const("devices this process uses under jax.distributed"),
    "XLA_PYTHON_CLIENT_PREALLOCATE": _preallocate,
    "XLA_PYTHON_CLIENT_MEM_FRACTION": _fraction,
    "XLA_CLIENT_MEM_FRACTION": _fraction,
    "XLA_PYTHON_CLIENT_ALLOCATOR": _allocator,
    "TF_GPU_ALLOCATOR": _const("TensorFlow-style allocator choice (cuda_malloc_async)"),
    "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB": _const("GPU memory reserved for collectives"),
    "JAX_SKIP_CUDA_CONSTRAINTS_CHECK": _const("skips the CUDA library version checks at plugin start"),
    "ENABLE_PJRT_COMPATIBILITY": _const("relaxes the plugin/framework PJRT API version check to same major"),
    "XLA_FLAGS": _const("XLA compiler and runtime flags"),
    "TF_CPP_MIN_LOG_LEVEL": _const("C++ log level (0 shows the PJRT version lines)"),
    "CUDA_ROOT": _const("where XLA looks for ptxas and libdevice"),
    "LD_LIBRARY_PATH": _const("searched before the pip CUDA wheels: an old CUDA here shadows them"),
    "TPU_LIBRARY_PATH": _tpu_library_path,
    "JAX_FORCE_TPU_INIT": _const("forces Cloud TPU setup even with no chips found"),
    "TPU_SKIP_MDS_QUERY": _const("libtpu does not query the GCE metadata server"),
    "LIBTPU_INIT_ARGS": _const("flags passed to libtpu"),
    "ALLOW_MULTIPLE_LIBTPU_LOAD": _const("lets several processes load libtpu at once"),
    "TPU_VISIBLE_CHIPS": _const("chips this process uses"),
    "TPU_VISIBLE_DEVICES": _const("chips this process uses"),
    "TPU_CHIPS_PER_PROCESS_BOUNDS": _const("chips per process (several processes per host)"),
    "TPU_PROCESS_BOUNDS": _const("process grid on the host"),
    "TPU_ACCELERATOR_TYPE": _const("TPU slice type"),
    "TPU_WORKER_ID": _const("this host's index in the slice"),
    "TPU_WORKER_HOSTNAMES": _const("hosts of the slice"),
    "JAX_COORDINATOR_ADDRESS": _const("jax.distributed coordinator host:port (the process count and index still come from a launcher)"),
    "JAX_COORDINATOR_PORT": _const("jax.distributed coordinator port, on the host a launcher names (jax 0.8.1 and later)"),
    "JAX_COORDINATOR_BIND_ADDRESS": _const("where process 0's jax.distributed service listens"),
    "JAX_LOCAL_DEVICE_IDS": _const("jax.distributed: the local devices this process uses"),
    # Often set by hand, never read by JAX (0.4.36 to 0.10 checked): the cluster then looks unconfigured.
    "JAX_NUM_PROCESSES": _const("not read by JAX", "JAX does not read it: pass num_processes to jax.distributed.initialize (devctl: --num-processes)"),
    "JAX_PROCESS_ID": _const("not read by JAX", "JAX does not read it: pass process_id to jax.distributed.initialize (devctl: --process-id)"),
    "NCCL_DEBUG": _const("NCCL logging"),
    "NCCL_SHM_DISABLE": _const("NCCL does not use /dev/shm"),
}


def env_vars(environ: Mapping[str, str] | None = None) -> list[EnvVar]:
    """Every set variable that affects JAX's device behaviour, with what its value means, and every other JAX_*/XLA_* one."""
    environ = os.environ if environ is None else environ
    out = []
    if "XLA_PYTHON_CLIENT_MEM_FRACTION" in environ and "XLA_CLIENT_MEM_FRACTION" in environ:
        both = "both XLA_CLIENT_MEM_FRACTION and the deprecated XLA_PYTHON_CLIENT_MEM_FRACTION are set: JAX raises ValueError"
    else:
        both = None
    for name in sorted(environ):
        explain = _EXPLAIN.get(name)
        if explain is None and not name.startswith(("JAX_", "XLA_", "PJRT_", "TPU_", "LIBTPU")):
            continue
        value = environ[name]
        meaning, problem = explain(value) if explain else ("", None)
        if name == "XLA_PYTHON_CLIENT_MEM_FRACTION":
            problem = problem or both or "deprecated: use XLA_CLIENT_MEM_FRACTION"
        out.append(EnvVar(name=name, value=value, meaning=meaning, problem=problem))
    return out


def check_platforms(platforms: list[str] | None) -> list[str] | None:
    """Lower-cased platform names, `gpu` kept as an alias JAX expands itself.

    Accepted: the platforms JAX knows by name, and those PJRT_NAMES_AND_LIBRARY_PATHS adds.
    """
    if not platforms:
        return None
    from_env = [item.split(os.pathsep)[0].lower() for item in os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "").split(",") if item]
    known = set(KNOWN_PLATFORM_NAMES) | set(from_env)
    names = []
    for item in platforms:
        for name in item.split(","):
            name = name.strip().lower()
            if name not in known:
                raise UsageError(f"unknown --platform {name!r}; accepted: {', '.join(sorted(known))}")
            names.append(name)
    return names
