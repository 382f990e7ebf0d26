"""How busy a GPU was: NVML's GPM counters where the GPU has them (Hopper and newer), else NVML's utilization.

The two are not the same figure. NVML's utilization (what nvidia-smi shows) is the share of its sample period in
which any kernel was running: a matmul loop read 78% on an H200 while GPM said SM 64%, tensor 63%, DRAM 13%.
GPM counts which units were busy, between two samples devctl takes `window_s` apart. Ratios are 0..1, in the
meanings dcgm-exporter's DCGM_FI_PROF_* fields have; throughput is bytes per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from devctl.model import json_schema

BusySource = Literal["gpm", "nvml-utilization"]
# What each source's figures are, said where a person reads them.
SOURCE_LABELS: dict[str, str] = {
    "gpm": "NVML GPM: which units were busy",
    "nvml-utilization": "NVML utilization: a kernel was running",
}

_RATIO = json_schema(minimum=0, maximum=1)


@dataclass(frozen=True)
class BusyCounters:
    """GPM's counters over one window, for a whole GPU or one MIG GPU instance; None where GPM did not give one
    (the reason is in the owner's `unavailable`)."""

    sm_active_ratio: float | None = field(default=None, metadata=_RATIO)  # SMs busy (GPM SM_UTIL; DCGM_FI_PROF_SM_ACTIVE)
    sm_occupancy_ratio: float | None = field(default=None, metadata=_RATIO)  # warps resident of the maximum (GPM SM_OCCUPANCY)
    tensor_active_ratio: float | None = field(default=None, metadata=_RATIO)  # any tensor pipe busy (GPM ANY_TENSOR_UTIL)
    tensor_hmma_active_ratio: float | None = field(default=None, metadata=_RATIO)  # half-precision tensor pipe busy (GPM HMMA_TENSOR_UTIL)
    dram_active_ratio: float | None = field(default=None, metadata=_RATIO)  # DRAM bandwidth used of the peak (GPM DRAM_BW_UTIL)
    gr_engine_active_ratio: float | None = field(default=None, metadata=_RATIO)  # any graphics or compute engine busy (GPM GRAPHICS_UTIL)
    pcie_tx_bytes_per_s: float | None = None  # from the GPU to the host (GPM PCIE_TX_PER_SEC)
    pcie_rx_bytes_per_s: float | None = None  # from the host to the GPU (GPM PCIE_RX_PER_SEC)
    nvlink_tx_bytes_per_s: float | None = None  # all NVLinks, out of the GPU (GPM NVLINK_TOTAL_TX_PER_SEC)
    nvlink_rx_bytes_per_s: float | None = None  # all NVLinks, into the GPU (GPM NVLINK_TOTAL_RX_PER_SEC)


@dataclass(frozen=True)
class MigBusy:
    """One MIG GPU instance's GPM counters (nvmlGpmMigSampleGet)."""

    gpu_instance_id: int
    uuid: str | None  # the MIG device's, "MIG-..."
    counters: BusyCounters
    unavailable: dict[str, str] = field(default_factory=dict)  # a counter left None -> why


@dataclass(frozen=True)
class ProcessBusy:
    """One process's share of a GPU, from NVML's own per-process samples (nvmlDeviceGetProcessUtilization) in the
    GPU's `process_window_s`: the same measure as NVML's utilization, per process."""

    pid: int  # of the host's pid namespace, as NVML gives it
    kernel_active_ratio: float | None = field(default=None, metadata=_RATIO)  # mean share of time a kernel of this process ran
    memory_active_ratio: float | None = field(default=None, metadata=_RATIO)  # mean share of time its kernels read or wrote device memory
    samples: int = field(default=0, metadata=json_schema(minimum=0))  # NVML's samples of it in the window


@dataclass(frozen=True)
class GpuBusy:
    """How busy one GPU was, and by which measure."""

    index: int  # NVML's
    source: BusySource  # "gpm": GPM counters over window_s; "nvml-utilization": only NVML's utilization (no GPM here)
    label: str  # what the figures mean, in words
    window_s: float | None  # GPM: the time between its two samples; None without GPM
    counters: BusyCounters  # GPM's; every one None without GPM
    # NVML's utilization, on every GPU: the share of the driver's last sample period (1/6 s to 1 s, by product) in
    # which a kernel ran, and in which device memory was read or written.
    kernel_active_ratio: float | None = field(default=None, metadata=_RATIO)
    memory_active_ratio: float | None = field(default=None, metadata=_RATIO)
    mig: list[MigBusy] = field(default_factory=list)  # each MIG GPU instance's counters, where MIG is on
    processes: list[ProcessBusy] = field(default_factory=list)  # each process NVML sampled in process_window_s; [] when idle
    process_window_s: float | None = None  # how far back the per-process samples were read
    unavailable: dict[str, str] = field(default_factory=dict)  # a field left None -> why
