"""AMD GPUs from the KFD topology in sysfs, counted the way JAX's ROCm plugin counts them.

jax/_src/hardware_utils.py num_available_amd_gpus(): 1 when /dev/dxg exists
(WSL2); otherwise every /sys/class/kfd/kfd/topology/nodes/*/properties with
simd_count > 0, skipping files over 16 KB. CPU nodes have simd_count 0.
"""

from __future__ import annotations

import re

from devctl.hostroot import HostRoot
from devctl.model.hardware import AmdGpu, AmdReport
from devctl.text import printable

TOPOLOGY = "/sys/class/kfd/kfd/topology/nodes"
_MAX_PROPERTIES_BYTES = 16 * 1024  # JAX skips larger files
# KFD heap types that are device memory: HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC and _PRIVATE.
_VRAM_HEAP_TYPES = {1, 2}


def amd_gpus(root: HostRoot) -> list[AmdGpu]:
    return list(amd_report(root).gpus)


def amd_report(root: HostRoot) -> AmdReport:
    gpus: list[AmdGpu] = []
    skipped: list[str] = []
    for name in sorted((n for n in root.listdir(TOPOLOGY) if n.isdigit()), key=int):
        path = f"{TOPOLOGY}/{name}/properties"
        props, why = _properties(root, path)
        if props is None:
            skipped.append(f"node {name}: {why}")
            continue
        if props.get("simd_count", 0) <= 0:
            continue  # a CPU node
        gpus.append(_gpu(root, int(name), props))
    dxg = root.exists("/dev/dxg")
    return AmdReport(
        gpus=tuple(gpus),
        kfd_present=root.exists("/dev/kfd"),
        dxg_present=dxg,
        jax_gpu_count=1 if dxg else len(gpus),
        skipped_nodes=tuple(skipped),
    )


def _properties(root: HostRoot, path: str) -> tuple[dict[str, int] | None, str | None]:
    st = root.stat(path)
    if st is None:
        return None, "no properties file"
    size = st.st_size
    # sysfs reports 4096 for every file, so this only trips on real oversized files, as in JAX.
    if size > _MAX_PROPERTIES_BYTES:
        return None, f"properties file is {size} bytes, over JAX's 16 KB limit"
    text = root.read_text(path, limit=_MAX_PROPERTIES_BYTES)
    if text is None:
        return None, "properties file is not readable"
    return parse_properties(text), None


def parse_properties(text: str) -> dict[str, int]:
    """KFD 'key value' lines; values are decimal integers."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(\w+)\s+(-?\d+)\s*", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def _gpu(root: HostRoot, node: int, props: dict[str, int]) -> AmdGpu:
    unavailable: dict[str, str] = {}
    name = printable(root.read_text(f"{TOPOLOGY}/{node}/name", limit=256) or "") or None
    if name is None:
        unavailable["name"] = "empty or missing name file"
    gfx_version = props.get("gfx_target_version") or None
    vram = _vram_bytes(root, node, props)
    if vram is None:
        unavailable["vram_bytes"] = "no local_mem_size and no frame-buffer mem_banks"
    render_minor = props.get("drm_render_minor")
    if render_minor is not None and render_minor < 0:
        render_minor = None
    return AmdGpu(
        node=node,
        name=name,
        vendor_id=props.get("vendor_id"),
        device_id=props.get("device_id"),
        simd_count=props["simd_count"],
        gfx_target_version=gfx_version,
        gfx_target=gfx_target(gfx_version) if gfx_version else None,
        vram_bytes=vram,
        pci_address=_pci_address(props),
        drm_render_minor=render_minor,
        render_node=f"/dev/dri/renderD{render_minor}" if render_minor is not None else None,
        unavailable=unavailable,
    )


def gfx_target(version: int) -> str:
    """90010 -> 'gfx90a', 90402 -> 'gfx942', 110000 -> 'gfx1100' (major*10000 + minor*100 + stepping)."""
    major, rest = divmod(version, 10000)
    minor, stepping = divmod(rest, 100)
    return f"gfx{major}{minor:x}{stepping:x}"


def _vram_bytes(root: HostRoot, node: int, props: dict[str, int]) -> int | None:
    # Newer kernels always print local_mem_size 0; the memory banks carry the real size.
    if props.get("local_mem_size", 0) > 0:
        return props["local_mem_size"]
    total = 0
    for bank in (b for b in root.listdir(f"{TOPOLOGY}/{node}/mem_banks") if b.isdigit()):
        text = root.read_text(f"{TOPOLOGY}/{node}/mem_banks/{bank}/properties", limit=_MAX_PROPERTIES_BYTES)
        bank_props = parse_properties(text or "")
        if bank_props.get("heap_type") in _VRAM_HEAP_TYPES:
            total += bank_props.get("size_in_bytes", 0)
    return total or None


def _pci_address(props: dict[str, int]) -> str | None:
    # location_id is (bus << 8) | devfn; devfn is (device << 3) | function.
    location = props.get("location_id")
    if not location:
        return None
    bus, devfn = location >> 8, location & 0xFF
    return f"{props.get('domain', 0):04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"
