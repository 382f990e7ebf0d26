"""`devctl bench transfer`'s PCIe roof: each GPU's link from NVML (discovery.nvml) and its theoretical peak."""

from __future__ import annotations

import os
from dataclasses import replace

from devctl.model import bench_transfer as m
from devctl.probe.bench_devices import device_name

# Read the PCIe link state after transfers at least this large (small ones may not wake a power-saving link).
LINK_SAMPLE_MIN_BYTES = 1 << 20


# Generation -> (GT/s per lane, encoding efficiency), reference B.4/B.5.
PCIE_GEN = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 236 / 256),  # FLIT mode: 236 payload bytes per 256-byte flit (approximate)
}


def pcie_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical per-direction peak: GT/s x lanes x encoding / 8, decimal GB/s."""
    if gen not in PCIE_GEN or not width:
        return None
    gts, eff = PCIE_GEN[gen]
    return gts * width * eff / 8


def read_nvml_links(gpus: list) -> tuple[dict[int, m.PcieLink], str | None]:
    """Each GPU's PCIe link from NVML (discovery.nvml), keyed by jax device id; NVML's absence is normal and only recorded."""
    from devctl.discovery.nvml import pcie_links

    keys: dict[int, str | int] = {}
    unknown: dict[int, m.PcieLink] = {}
    for d in gpus:
        try:
            keys[d.id] = nvml_key(d)
        except Exception as e:  # which GPU NVML calls it is unknown: this device has no roof, the others still do
            unknown[d.id] = m.PcieLink(device=device_name(d), reason=f"NVML could not read the link: {e}")
    found, reason = pcie_links(list(keys.values()))
    if reason is not None:
        return {}, f"NVML unavailable: {reason}"
    read = dict(zip(keys, found))
    return {d.id: unknown[d.id] if d.id in unknown else roof_link(device_name(d), read[d.id]) for d in gpus}, None


def nvml_key(dev) -> str | int:
    """How NVML finds a jax GPU device: the PCI bus id CUDA gives for it, else its ordinal where that is NVML's index."""
    from devctl.probe.backends import cuda_pci_bus_id

    bus = getattr(dev, "pci_bus_id", None) or cuda_pci_bus_id(dev.local_hardware_id)
    if bus:
        return bus
    # No bus id (no libcuda to ask): CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's ordinals NVML's indexes.
    ordinal = dev.local_hardware_id if dev.local_hardware_id is not None else dev.id
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return int(ordinal)
    raise LookupError(f"cannot tell which NVML GPU is CUDA device {ordinal}: no PCI bus id from CUDA")


# Without these there is no roof: the peak is the maximum generation times the maximum width.
_ROOF_FIELDS = ("handle", "pci_bus_id", "pcie_link_gen_max", "pcie_link_width_max")


def roof_link(name: str, link) -> m.PcieLink:
    """The bench's link from NVML's facts (model.hardware.GpuPcieLink)."""
    missing = next((link.unavailable[f] for f in _ROOF_FIELDS if f in link.unavailable), None)
    if missing is not None:
        return m.PcieLink(device=name, reason=f"NVML could not read the link: {missing}")
    out = m.PcieLink(
        device=name,
        pci_bus_id=link.pci_bus_id,
        max_gen=link.pcie_link_gen_max,
        max_width=link.pcie_link_width_max,
        gpu_max_gen=link.pcie_link_gen_gpu_max,
        peak_gbps=pcie_peak_gbps(link.pcie_link_gen_max, link.pcie_link_width_max),
    )
    if out.peak_gbps is None:
        return replace(out, reason=f"unknown PCIe generation {link.pcie_link_gen_max}")
    return out


def sample_link(link: m.PcieLink) -> m.PcieLink:
    """Fold the current generation and width into the highest seen so far."""
    from devctl.discovery.nvml import pcie_links

    if link.pci_bus_id is None:  # NVML finds no GPU by a missing bus id: nothing new to fold in
        return link
    found, _ = pcie_links([link.pci_bus_id])
    now = found[0] if found else None
    if now is None or now.pcie_link_gen_current is None or now.pcie_link_width_current is None:
        return link
    seen_gen = max(now.pcie_link_gen_current, link.seen_gen or 0)
    seen_width = max(now.pcie_link_width_current, link.seen_width or 0)
    below = seen_gen < (link.max_gen or 0) or seen_width < (link.max_width or 0)
    return replace(link, seen_gen=seen_gen, seen_width=seen_width, below_max=below)
