"""NVIDIA hardware as the kernel shows it, without the driver's help: PCI functions and /dev/nvidia* nodes.

A GPU on the PCI bus with no driver bound and no device node explains "the GPU
is in the machine but CUDA sees nothing", which NVML alone cannot say.
"""

from __future__ import annotations

import re

from devctl.discovery.pci import (
    PCI_DEVICES,
    class_code,
    hex_id,
    link_name,
    numa_node,
    pci_addresses,
)
from devctl.hostroot import HostRoot
from devctl.model.hardware import PciFunction

NVIDIA_PCI_VENDOR_ID = "0x10de"
# 0x03xxxx is a display controller: the GPU itself, not its audio function.
_DISPLAY_CLASS_PREFIX = "0x03"
# PCI class 0x0680: "other bridge", which is how NVSwitch chips enumerate on HGX boards.
_NVSWITCH_CLASS_PREFIX = "0x0680"
# jax/_src/hardware_utils.py _NVIDIA_GPU_DEVICES: nvidiactl covers Docker/Kubernetes, dxg WSL2.
_JAX_NVIDIA_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg")
_GPU_NODE_RE = re.compile(r"nvidia\d+")


def nvidia_device_nodes(root: HostRoot) -> list[str]:
    """The NVIDIA-related nodes present in the root's /dev, GPUs in numeric order first."""
    names = root.listdir("/dev")
    gpus = sorted((n for n in names if _GPU_NODE_RE.fullmatch(n)), key=lambda n: int(n[6:]))
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
    for address, base in _nvidia_functions(root):
        klass = class_code(root, f"{base}/class")
        # An unreadable class still counts: skipping it would hide a GPU; a known other class is not one.
        if klass is not None and not klass.startswith(_DISPLAY_CLASS_PREFIX):
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


def nvswitch_functions(root: HostRoot) -> tuple[str, ...]:
    """PCI addresses of the NVSwitch bridges: where they exist, CUDA needs the fabric manager running."""
    out = [
        address.lower()
        for address, base in _nvidia_functions(root)
        if (class_code(root, f"{base}/class") or "").startswith(_NVSWITCH_CLASS_PREFIX)
    ]
    return tuple(sorted(out))


def _nvidia_functions(root: HostRoot) -> list[tuple[str, str]]:
    """(address, sysfs directory) of every PCI function with NVIDIA's vendor id."""
    out = []
    for address in pci_addresses(root):
        base = f"{PCI_DEVICES}/{address}"
        if hex_id(root, f"{base}/vendor") == NVIDIA_PCI_VENDOR_ID:
            out.append((address, base))
    return out
