"""The doctor's rules over NVIDIA GPUs and the host around them: the CUDA plugin, hidden GPUs, the driver, CUDA libraries, memory, /dev/shm.

Each rule reads a Scene and yields Drafts (devctl.checks.scene); the order
they run in is devctl.checks.diagnosis.RULES.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from devctl.checks.advice import HIDDEN_GPU_VALUES, UNHIDE_GPUS
from devctl.checks.catalogue import CUDA_FIX
from devctl.checks.scene import Draft, Scene, cuda_for_branch, driver_branch, few
from devctl.model.remedy import env_remedy
from devctl.units import format_bytes

_PREALLOCATE_OFF = ("false", "False", "0")


def cuda_plugin_missing(s: Scene) -> Iterable[Draft]:
    """NVIDIA GPUs with their driver, but no CUDA plugin: JAX falls back to the CPU."""
    gpus = s.nvidia_gpus()
    if not gpus or s.ok("cuda") or s.cuda_packages():
        return
    bound = [f for f in s.hw.nvidia_pci if f.driver == "nvidia"]
    if not bound and not getattr(s.hw.nvidia, "gpus", None):
        return  # no driver: that is the machine's problem first, not the plugin's
    evidence = [f"{len(gpus)} NVIDIA GPU(s): {few(gpus)}", "no jax-cuda12/13 plugin package is installed"]
    if any(n in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg") for n in s.hw.nvidia_device_nodes):
        evidence.append(
            "JAX says: An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed. "
            f"Falling back to {s.inv.default_platform or 'cpu'}."
        )
    # A cuda row here is JAX_PLATFORMS naming cuda, which no plugin provides: installing one is what starts it.
    yield Draft("cuda-plugin-missing", evidence, ["devices", "backends"], fix=_cuda_fix(s), backends=s.cuda_rows())


def _cuda_fix(s: Scene) -> str:
    """The one CUDA extra this driver branch supports, when the driver says its branch."""
    branch = driver_branch(getattr(s.hw.nvidia, "driver_version", None) or s.facts.kernel_driver_version)
    if branch is None:
        return CUDA_FIX
    if branch >= 580:
        return f'pip install -U "jax[cuda13]" (driver branch {branch} supports CUDA 13)'
    if branch >= 525:
        return f'pip install -U "jax[cuda12]" (driver branch {branch} supports CUDA 12, not 13)'
    return f"update the NVIDIA driver to >= 525 (it is {branch}), then pip install -U \"jax[cuda12]\""


def hidden_gpus(s: Scene) -> Iterable[Draft]:
    """GPUs present but hidden from CUDA: by CUDA_VISIBLE_DEVICES, or by a container given no device nodes."""
    gpus = s.nvidia_gpus()
    if not gpus or s.ok("cuda"):
        return
    value = s.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None and value.strip() in HIDDEN_GPU_VALUES:
        yield Draft(
            "no-visible-gpu",
            [f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from CUDA, and {len(gpus)} NVIDIA GPU(s) are present"],
            ["devices", "backends", "env"],
            fix=UNHIDE_GPUS,
            remedies=list(env_remedy({"CUDA_VISIBLE_DEVICES": None})),
            backends=s.cuda_rows(),
        )
    bound = [f.address for f in s.hw.nvidia_pci if f.driver == "nvidia"]
    nodes = [n for n in s.hw.nvidia_device_nodes if re.fullmatch(r"/dev/nvidia(\d+|ctl)", n)]
    if bound and not nodes:
        yield Draft(
            "no-visible-gpu",
            [f"{len(bound)} GPU(s) bound to the nvidia driver ({few(bound)}) but no /dev/nvidia* device node: a container started without GPUs"],
            ["devices", "backends"],
            fix="start the container with --gpus all (NVIDIA Container Toolkit), or request nvidia.com/gpu in Kubernetes",
            backends=s.cuda_rows(),
        )


def fabric_manager_missing(s: Scene) -> Iterable[Draft]:
    """NVSwitch bridges on the bus and no fabric manager running: cuInit cannot succeed."""
    if not s.facts.nvswitches or s.facts.fabric_manager is not None or not s.nvidia_gpus():
        return
    branch = driver_branch(getattr(s.hw.nvidia, "driver_version", None) or s.facts.kernel_driver_version)
    package = f"nvidia-fabricmanager-{branch}" if branch else "nvidia-fabricmanager-<driver branch>"
    yield Draft(
        "fabric-manager-missing",
        [
            f"{len(s.facts.nvswitches)} NVSwitch bridge(s) on the PCI bus ({few(list(s.facts.nvswitches))}, class 0x0680)",
            "no nv-fabricmanager process is running",
        ],
        ["backends", "devices"],
        fix=f"install {package} (the same branch as the driver) and start it: sudo systemctl enable --now nvidia-fabricmanager",
        backends=s.cuda_rows(),
    )


def driver_library_mismatch(s: Scene) -> Iterable[Draft]:
    """The loaded kernel module and the user-space libcuda are different driver versions."""
    kernel, libs = s.facts.kernel_driver_version, s.facts.libcuda_versions
    if kernel and libs and kernel not in libs:
        yield Draft(
            "driver-library-mismatch",
            [f"kernel module {kernel} (/proc/driver/nvidia/version), user-space libcuda.so.{', libcuda.so.'.join(libs)}"],
            ["backends", "nvml-health"],
            backends=s.cuda_rows(),
        )


def driver_too_old_offline(s: Scene) -> Iterable[Draft]:
    """Without NVML (a host root, a broken driver) the kernel module's version still says which CUDA it supports."""
    from devctl.checks.cuda_driver import check_driver_vs_runtime
    from devctl.discovery.cuda_wheels import cuda_runtime_version

    if getattr(s.hw.nvidia, "cuda_driver_version", None) or not s.facts.kernel_driver_version:
        return
    supported = cuda_for_branch(driver_branch(s.facts.kernel_driver_version))
    if supported is None:
        return
    finding = check_driver_vs_runtime(supported[0] * 1000 + supported[1] * 10, cuda_runtime_version(s.env.cuda_wheels))
    if finding is not None:
        yield Draft(
            "driver-too-old",
            [f"driver {s.facts.kernel_driver_version} (kernel module): {finding.message}"],
            ["versions"],
            fix=finding.hint,
            severity="error" if finding.severity == "error" else "warning",
            backends=s.cuda_rows() if finding.severity == "error" else [],  # a warning slows CUDA; it does not stop it
        )


def cuda_library_shadowed(s: Scene) -> Iterable[Draft]:
    """LD_LIBRARY_PATH puts CUDA libraries ahead of the pip wheels JAX was installed with."""
    wheels = [w for w in s.env.cuda_wheels if w.component in ("cuda_runtime", "cudnn", "cublas", "cusparse", "cufft", "cusolver", "nccl", "nvjitlink")]
    if not s.facts.ld_library_cuda or not (wheels or s.cuda_packages()):
        return
    dirs = [f"{d} ({', '.join(libs[:3])})" for d, libs in s.facts.ld_library_cuda.items()]
    pip = ", ".join(f"{w.distribution} {w.version}" for w in wheels[:3]) or ", ".join(p.name for p in s.cuda_packages())
    yield Draft(
        "cuda-library-shadowed",
        [f"LD_LIBRARY_PATH puts {'; '.join(dirs)} ahead of the pip CUDA libraries ({pip})"],
        ["env", "backends"],
        fix=f"unset LD_LIBRARY_PATH (or drop {', '.join(s.facts.ld_library_cuda)} from it) so JAX loads the pip wheels",
        remedies=list(env_remedy({"LD_LIBRARY_PATH": None})),
        severity="warning",
    )


def preallocation_contention(s: Scene) -> Iterable[Draft]:
    """Other processes hold the GPUs while preallocation is on: the next JAX process finds no room."""
    if s.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "") in _PREALLOCATE_OFF and "XLA_PYTHON_CLIENT_PREALLOCATE" in s.environ:
        return
    evidence = []
    for g in getattr(s.nvml, "gpus", None) or ():
        others = [p for p in g.processes if p.pid != os.getpid()]
        if others and g.memory_total_bytes:
            used = g.memory_used_bytes or 0
            evidence.append(
                f"GPU {g.index}: {len(others)} process(es) ({', '.join(str(p.pid) for p in others[:4])}) hold "
                f"{format_bytes(used)} of {format_bytes(g.memory_total_bytes)}"
            )
    if not evidence:
        for path, refs in sorted(s.facts.nvidia_holders.items()):
            if refs:
                evidence.append(f"{path} is open in " + ", ".join(f"pid {p.pid} ({p.command or '?'})" for p in refs[:3]))
    if evidence:
        evidence.append("XLA_PYTHON_CLIENT_PREALLOCATE is not false: a new JAX process asks for 75% of each GPU at start")
        yield Draft("preallocation-contention", evidence, ["memory"], severity="warning")


def nccl_shm_too_small(s: Scene) -> Iterable[Draft]:
    """Several GPUs and a /dev/shm too small for NCCL's buffers."""
    from devctl.checks.machine import SHM_FAIL_BYTES, SHM_WARN_BYTES, gpu_count

    gpus = gpu_count(s.hw, s.inv.devices)
    shm = s.inv.host.shm_total_bytes
    if gpus >= 2 and shm is not None and shm < SHM_WARN_BYTES:
        yield Draft(
            "nccl-shm-too-small",
            [f"/dev/shm is {format_bytes(shm)} with {gpus} GPUs"],
            ["host"],
            severity="error" if shm <= SHM_FAIL_BYTES else "warning",
        )
