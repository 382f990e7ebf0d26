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
from dataclasses import dataclass, field
from typing import Mapping

from devctl.discovery.pci import PCI_DEVICES, class_code, hex_id, pci_addresses
from devctl.discovery.procs import process_ref, scan_holders
from devctl.hostroot import HostRoot
from devctl.model.hardware import ProcessRef

NVIDIA_VENDOR = "0x10de"
# PCI class 0x0680: "other bridge", which is how NVSwitch chips enumerate on HGX boards.
_NVSWITCH_CLASS_PREFIX = "0x0680"
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


@dataclass(frozen=True)
class MachineFacts:
    nvswitches: tuple[str, ...]  # PCI addresses of NVSwitch bridges
    fabric_manager: ProcessRef | None  # the running nv-fabricmanager, if any
    nvidia_holders: dict[str, tuple[ProcessRef, ...]]  # /dev/nvidiaN -> processes with it open
    kernel_driver_version: str | None  # from /proc/driver/nvidia/version
    libcuda_versions: tuple[str, ...]  # user-space libcuda.so.<version> files found
    ld_library_cuda: dict[str, tuple[str, ...]]  # LD_LIBRARY_PATH directory -> CUDA libraries in it
    notes: list[str] = field(default_factory=list)


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


def nvswitch_functions(root: HostRoot) -> tuple[str, ...]:
    out = []
    for address in pci_addresses(root):
        base = f"{PCI_DEVICES}/{address}"
        if hex_id(root, f"{base}/vendor") != NVIDIA_VENDOR:
            continue
        if (class_code(root, f"{base}/class") or "").startswith(_NVSWITCH_CLASS_PREFIX):
            out.append(address.lower())
    return tuple(sorted(out))


def find_process(root: HostRoot, name: str) -> ProcessRef | None:
    """The first live process whose comm or argv[0] basename is `name`."""
    for pid in sorted(int(p) for p in root.listdir("/proc") if p.isdigit()):
        comm = root.read_text(f"/proc/{pid}/comm", limit=256) or ""
        cmdline = root.read_text(f"/proc/{pid}/cmdline", limit=4096) or ""
        argv0 = os.path.basename(cmdline.split("\0", 1)[0]) if cmdline else ""
        # comm is cut to 15 characters: "nv-fabricmanage".
        if name in (argv0, comm) or (len(comm) == 15 and name.startswith(comm)):
            return process_ref(root, pid)
    return None


def kernel_driver_version(root: HostRoot) -> str | None:
    m = _KERNEL_VERSION_RE.search(root.read_text("/proc/driver/nvidia/version") or "")
    return m.group(1) if m else None


def libcuda_versions(root: HostRoot) -> tuple[str, ...]:
    found = []
    for directory in LIBCUDA_DIRS:
        for name in root.listdir(directory):
            m = _LIBCUDA_RE.match(name)
            if m:
                found.append(m.group(1))
    return tuple(dict.fromkeys(found))


def ld_library_cuda(value: str) -> dict[str, tuple[str, ...]]:
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
