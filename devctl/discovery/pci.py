"""Small readers of a PCI device's sysfs directory, shared by the NVIDIA, TPU and NVSwitch scans, and PCI addresses.

Every value is checked against the form the kernel writes before it is used or
shown: a tree under --host-root is data someone else prepared, and a "vendor"
file or a directory name there can hold anything, escape sequences included.
"""

from __future__ import annotations

import posixpath
import re

from devctl.hostroot import HostRoot

PCI_DEVICES = "/sys/bus/pci/devices"
# "dddd:bb:dd.f" as sysfs names functions (the domain has more digits on some VMD and Hyper-V hosts).
PCI_ADDRESS_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.IGNORECASE)
_HEX_ID_RE = re.compile(r"0x[0-9a-f]{4}")  # vendor, device, subsystem_device
_CLASS_RE = re.compile(r"0x[0-9a-f]{6}")
# Kernel driver names ("nvidia", "vfio-pci"), iommu group numbers and PCI addresses.
_LINK_NAME_RE = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")
# A bus id as NVML ("00000000:3B:00.0"), sysfs ("0000:3b:00.0") or lspci ("3b:00.0") writes it.
_BUS_ID_RE = re.compile(r"(?:([0-9a-f]{1,8}):)?([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])")


def pci_addresses(root: HostRoot) -> list[str]:
    """The PCI functions' entries in sysfs, as named there; entries whose names are not PCI addresses are skipped."""
    return [name for name in root.listdir(PCI_DEVICES) if PCI_ADDRESS_RE.fullmatch(name)]


def hex_id(root: HostRoot, path: str) -> str | None:
    """A 16-bit id file ("0x10de"), lower-cased; None when absent or not of that form."""
    text = (root.read_text(path, limit=64) or "").lower()
    return text if _HEX_ID_RE.fullmatch(text) else None


def class_code(root: HostRoot, path: str) -> str | None:
    """A 24-bit PCI class file ("0x030200"); None when absent or not of that form."""
    text = (root.read_text(path, limit=64) or "").lower()
    return text if _CLASS_RE.fullmatch(text) else None


def link_name(root: HostRoot, path: str) -> str | None:
    """The last component of a sysfs symlink's target (a driver's or an iommu group's name), or None.

    The link is read, never followed. A target outside /sys is not the kernel's link (sysfs never points
    elsewhere) and counts as no link, so a planted link's target is never shown.
    """
    target = root.readlink(path)
    if target is None or not target.startswith("/sys/"):
        return None
    name = posixpath.basename(target)
    return name if _LINK_NAME_RE.fullmatch(name) else None


def linked_pci_address(root: HostRoot, path: str) -> str | None:
    """The PCI address a sysfs `device` link points at (/sys/class/accel/accel0/device), lower-cased; or None."""
    name = link_name(root, path)
    return name.lower() if name is not None and PCI_ADDRESS_RE.fullmatch(name) else None


def numa_node(root: HostRoot, device_dir: str) -> int | None:
    """The device's NUMA node; None when the kernel reports -1 (no affinity) or nothing readable."""
    text = root.read_text(f"{device_dir}/numa_node", limit=64) or "-1"
    if not re.fullmatch(r"-?\d{1,6}", text):
        return None
    node = int(text)
    return node if node >= 0 else None


def normalize_pci_bus_id(bus_id: str | bytes | None) -> str | None:
    """'00000000:3B:00.0' (NVML), '0000:3b:00.0' (sysfs) or '3b:00.0' -> '0000:3b:00.0'; None if unparsable.

    CUDA, NVML and sysfs each write the same address differently: compare them only in this form."""
    if bus_id is None:
        return None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode("ascii", "replace")
    m = _BUS_ID_RE.fullmatch(bus_id.strip().strip("\0").lower())
    if not m:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"
