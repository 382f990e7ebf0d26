"""Small readers of a PCI device's sysfs directory, shared by the NVIDIA and TPU scans."""

from __future__ import annotations

import os

from devctl.hostroot import HostRoot


def link_name(root: HostRoot, path: str) -> str | None:
    """The last component of a sysfs symlink's target (a driver's or an iommu group's name), or None."""
    try:
        return os.path.basename(os.readlink(root.path(path)))
    except OSError:
        return None


def numa_node(root: HostRoot, device_dir: str) -> int | None:
    """The device's NUMA node; None when the kernel reports -1 (no affinity) or nothing readable."""
    try:
        node = int(root.read_text(f"{device_dir}/numa_node") or "-1")
    except ValueError:
        return None
    return node if node >= 0 else None
