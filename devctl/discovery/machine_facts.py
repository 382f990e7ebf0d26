"""Facts the diagnosis needs beyond the inventory, read without side effects (sysfs, /proc, /dev, the loader path).

NVSwitch bridges and the fabric manager daemon, who holds the NVIDIA device
nodes, the loaded kernel driver's version against the user-space libcuda
beside it, and CUDA libraries on LD_LIBRARY_PATH that would shadow the pip
wheels. Everything goes through a HostRoot so tests build these as trees;
LD_LIBRARY_PATH is this process's own, as it is what a job started here inherits.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from devctl.discovery.nvidia_pci import nvswitch_functions
from devctl.discovery.procs import find_process, scan_holders
from devctl.hostroot import HostRoot
from devctl.model.hardware import MachineFacts

# The daemon's process name (nvidia-fabricmanager package, nv-fabricmanager binary).
FABRIC_MANAGER = "nv-fabricmanager"
_NVIDIA_NODE_RE = re.compile(r"/dev/nvidia\d+")
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
_KERNEL_VERSION_RE = re.compile(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)")
_LIBCUDA_RE = re.compile(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$")
LIBCUDA_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",  # where the NVIDIA container toolkit mounts driver libraries
)
# Libraries JAX's CUDA plugin loads from the nvidia-* wheels; an older copy found first wins.
CUDA_LIBRARY_PREFIXES = ("libcudart.so", "libcudnn.so", "libcublas.so", "libcublasLt.so", "libcusparse.so", "libcufft.so",
                         "libcusolver.so", "libnccl.so", "libnvrtc.so", "libnvJitLink.so")  # fmt: skip


def machine_facts(root: HostRoot, environ: Mapping[str, str] | None = None) -> MachineFacts:
    environ = os.environ if environ is None else environ
    # Reading every process's fds costs; only worth it where NVIDIA nodes exist to be held.
    has_nodes = any(n.startswith("nvidia") for n in root.listdir("/dev"))
    scan = scan_holders(root, _NVIDIA_NODE_RE) if has_nodes else None
    return MachineFacts(
        nvswitches=nvswitch_functions(root),
        fabric_manager=find_process(root, FABRIC_MANAGER),
        nvidia_holders=dict(scan.holders) if scan else {},
        kernel_driver_version=kernel_driver_version(root),
        libcuda_versions=libcuda_versions(root),
        ld_library_cuda=ld_library_cuda(environ.get("LD_LIBRARY_PATH", "")),
    )


def kernel_driver_version(root: HostRoot) -> str | None:
    """The loaded NVIDIA kernel module's version, from /proc/driver/nvidia/version."""
    m = _KERNEL_VERSION_RE.search(root.read_text("/proc/driver/nvidia/version") or "")
    return m.group(1) if m else None


def libcuda_versions(root: HostRoot) -> tuple[str, ...]:
    """Versions of the user-space libcuda.so.<version> files in the usual library directories."""
    found = []
    for directory in LIBCUDA_DIRS:
        for name in root.listdir(directory):
            m = _LIBCUDA_RE.match(name)
            if m:
                found.append(m.group(1))
    return tuple(dict.fromkeys(found))


def ld_library_cuda(value: str) -> dict[str, tuple[str, ...]]:
    """{directory of LD_LIBRARY_PATH: the CUDA libraries in it}: these load before the pip wheels' own."""
    out = {}
    for directory in (d for d in value.split(os.pathsep) if d):
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        libs = tuple(n for n in names if n.startswith(CUDA_LIBRARY_PREFIXES))
        if libs:
            out[directory] = libs
    return out
