"""`devctl exporter`: the metrics it exports, as data (names, kinds, help, labels), and what one collection found.

docs/exporter.md's metric table, the Grafana dashboard's test and the collector all read METRICS, so a metric is named
in one place. Names follow Prometheus' conventions as dcgm-exporter 4.9 moved to: a `devctl_` prefix, base units
as suffixes (`_bytes`, `_seconds`, `_ratio`, `_celsius`, `_watts`), `_total` on counters. Pure stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Not dcgm-exporter's 9400, node-exporter's 9100, nvidia_gpu_exporter's 9835 or Prometheus' own 9090-9093.
DEFAULT_PORT = 9479
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
# Each scrape waits this long for its sources; a source still running is reported failed, never waited for.
DEFAULT_SCRAPE_TIMEOUT_S = 5.0

Kind = Literal["gauge", "counter", "info"]

# Who a series is about. Never `job` or `instance`: Prometheus sets those on every scraped series (a `job` of ours
# became `exported_job`, or replaced the scrape job under honor_labels), and `instance` already says the host.
# `program` is the executable's or script's base name or `python -m module`, never the command line (which can
# carry secrets and changes with every argument); `command` (the full line) only with --command-label, and `pid`
# and `container_id` (new at every restart) only with --per-process. pod, namespace, container and pod_uid are
# set only under Kubernetes (devctl.discovery.kubernetes says what is known). An empty label is not written: to
# Prometheus an empty label and no label are the same.
PROCESS = ("program", "command", "pid", "pod", "namespace", "container", "pod_uid", "container_id")
JOB = (*PROCESS, "process_index", "device", "platform", "device_kind")
GPU = ("gpu", "uuid", "pci_bus_id", "name", "device")
# GPM's series: a whole GPU's, or one MIG GPU instance's (`gpu_instance`: its GPU instance id, as dcgm-exporter's GPU_I_ID).
GPU_BUSY = (*GPU, "gpu_instance")
# libtpu's figures of a chip, under the process that holds it (its pid only with --per-process).
TPU_CHIP = ("chip", "version", *PROCESS)
# Job series are summed over a program's processes on each device unless --per-process; these take the largest.
JOB_MAX = ("devctl_job_memory_largest_free_block_bytes", "devctl_job_snapshot_age_seconds")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the full exported name (a counter's with its _total)
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    source: str = ""  # the source whose collection fills it (devctl_collect_success{source=...})


METRICS: tuple[MetricSpec, ...] = (
    # What each running job's own allocator reports, through devctl.monitor.publish().
    MetricSpec("devctl_job_memory_in_use_bytes", "gauge", "Bytes in use by the job's JAX allocator on a device (memory_stats bytes_in_use).", JOB, "publishers"),
    MetricSpec("devctl_job_memory_peak_bytes", "gauge", "Peak bytes in use by the job's JAX allocator (memory_stats peak_bytes_in_use).", JOB, "publishers"),
    MetricSpec("devctl_job_memory_limit_bytes", "gauge", "Bytes the job's JAX allocator may use on a device (memory_stats bytes_limit).", JOB, "publishers"),
    MetricSpec("devctl_job_memory_pool_bytes", "gauge", "Bytes the job's JAX allocator holds from the device (memory_stats pool_bytes; all of its limit when it preallocated).", JOB, "publishers"),
    MetricSpec("devctl_job_memory_largest_free_block_bytes", "gauge", "Largest free block of the job's JAX allocator (memory_stats largest_free_block_bytes).", JOB, "publishers"),
    MetricSpec("devctl_job_live_array_bytes", "gauge", "Bytes of the job's live jax.Array shards on a device (replicas counted on each device).", JOB, "publishers"),
    MetricSpec("devctl_job_live_arrays", "gauge", "Live jax.Arrays of the job with a shard on a device.", JOB, "publishers"),
    MetricSpec("devctl_job_snapshot_age_seconds", "gauge", "Age of the job's last published snapshot (the oldest of a program's processes).", PROCESS, "publishers"),
    MetricSpec("devctl_job_processes", "gauge", "Publishing processes of a program (1 per series with --per-process).", PROCESS, "publishers"),
    # What a new JAX process would get on each device now (a probe child at start, as `devctl memstats` runs).
    MetricSpec("devctl_device_memory_limit_bytes", "gauge", "bytes_limit a new JAX process gets on a device (probed once at start).", ("device", "platform", "device_kind"), "probe"),
    MetricSpec("devctl_device_memory_usable_bytes", "gauge", "What a new JAX process can allocate on a device now: the smaller of its bytes_limit and the driver's free memory.", ("device", "platform", "device_kind"), "probe"),
    # The driver's view (NVML).
    MetricSpec("devctl_gpu_memory_used_bytes", "gauge", "GPU memory in use, as the driver sees it (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_memory_total_bytes", "gauge", "GPU memory, as the driver sees it (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_memory_free_bytes", "gauge", "GPU memory free, as the driver sees it (NVML): what another process can still get.", GPU, "nvml"),
    MetricSpec("devctl_gpu_utilization_ratio", "gauge", "Share of the last sample period a kernel ran on the GPU (NVML utilization: nvidia-smi's GPU-Util, DCGM_FI_DEV_GPU_UTIL); not how much of the GPU was busy: see devctl_gpu_sm_active_ratio where GPM serves it.", GPU, "nvml"),
    MetricSpec("devctl_gpu_memory_utilization_ratio", "gauge", "Share of the last sample period device memory was read or written (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_temperature_celsius", "gauge", "GPU temperature (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_power_watts", "gauge", "GPU power draw (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_power_limit_watts", "gauge", "GPU enforced power limit (NVML).", GPU, "nvml"),
    MetricSpec("devctl_gpu_pcie_link_generation", "gauge", "PCIe link generation, now and at most (NVML).", (*GPU, "state"), "nvml"),
    MetricSpec("devctl_gpu_pcie_link_width", "gauge", "PCIe link width in lanes, now and at most (NVML).", (*GPU, "state"), "nvml"),
    MetricSpec("devctl_gpu_ecc_uncorrected_errors_total", "counter", "Uncorrected ECC errors since the driver loaded (volatile) and in the GPU's life (aggregate).", (*GPU, "scope"), "nvml"),
    MetricSpec("devctl_gpu_remapped_rows_uncorrectable", "gauge", "Rows remapped for uncorrectable errors (Ampere and newer).", GPU, "nvml"),
    MetricSpec("devctl_gpu_throttle_active", "gauge", "1 for each thermal or power slowdown active now, by NVML's name.", (*GPU, "reason"), "nvml"),
    MetricSpec("devctl_gpu_process_memory_used_bytes", "gauge", "GPU memory of one process, as NVML attributes it (--per-process only: host pids).", (*GPU, *PROCESS), "nvml"),
    # Which units of a GPU were busy, from NVML's GPM counters (Hopper and newer), over the window between two scrapes.
    MetricSpec("devctl_gpu_sm_active_ratio", "gauge", "Share of the window's cycles an SM had a warp resident, averaged over the SMs (NVML GPM SM_UTIL; DCGM_FI_PROF_SM_ACTIVE).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_sm_occupancy_ratio", "gauge", "Warps resident on the SMs, of the most they hold, over the window (NVML GPM SM_OCCUPANCY; DCGM_FI_PROF_SM_OCCUPANCY).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_tensor_active_ratio", "gauge", "Share of the window's cycles any tensor pipe was busy (NVML GPM ANY_TENSOR_UTIL; DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_dram_active_ratio", "gauge", "Share of the window's cycles device memory was sending or receiving data: bandwidth used of the peak (NVML GPM DRAM_BW_UTIL; DCGM_FI_PROF_DRAM_ACTIVE).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_gr_engine_active_ratio", "gauge", "Share of the window a graphics or compute engine was busy (NVML GPM GRAPHICS_UTIL; DCGM_FI_PROF_GR_ENGINE_ACTIVE).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_pcie_transmit_bytes_per_second", "gauge", "PCIe bytes per second from the GPU, over the window (NVML GPM PCIE_TX_PER_SEC; DCGM_FI_PROF_PCIE_TX_BYTES).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_pcie_receive_bytes_per_second", "gauge", "PCIe bytes per second into the GPU, over the window (NVML GPM PCIE_RX_PER_SEC; DCGM_FI_PROF_PCIE_RX_BYTES).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_nvlink_transmit_bytes_per_second", "gauge", "NVLink bytes per second out of the GPU, all links, over the window (NVML GPM NVLINK_TOTAL_TX_PER_SEC; DCGM_FI_PROF_NVLINK_TX_BYTES).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_nvlink_receive_bytes_per_second", "gauge", "NVLink bytes per second into the GPU, all links, over the window (NVML GPM NVLINK_TOTAL_RX_PER_SEC; DCGM_FI_PROF_NVLINK_RX_BYTES).", GPU_BUSY, "gpm"),
    MetricSpec("devctl_gpu_busy_window_seconds", "gauge", "Seconds the GPM figures of this scrape cover: since the previous scrape (the first scrape and --once: a 0.2 s window).", GPU, "gpm"),
    # TPU chips, from PCI and /dev.
    MetricSpec("devctl_tpu_chip_hbm_bytes", "gauge", "HBM of a TPU chip, from its version's table.", ("chip", "version", "pci_address"), "tpu"),
    MetricSpec("devctl_tpu_chip_holder", "gauge", "Processes of a program that hold a TPU chip's device path (1 per series with --per-process).", ("chip", "version", *PROCESS), "tpu"),
    # What libtpu says of each chip, asked of the process that holds it (its runtime metrics service; no publish() needed).
    MetricSpec("devctl_tpu_hbm_used_bytes", "gauge", "HBM in use on a TPU chip, as libtpu in the process holding it says (tpu.runtime.hbm.memory.usage.bytes, the chip's TensorCores summed).", TPU_CHIP, "tpu_runtime"),
    MetricSpec("devctl_tpu_hbm_total_bytes", "gauge", "HBM of a TPU chip, as libtpu in the process holding it says (tpu.runtime.hbm.memory.total.bytes).", TPU_CHIP, "tpu_runtime"),
    MetricSpec("devctl_tpu_duty_cycle_ratio", "gauge", "Share of libtpu's last sample period the chip's TensorCores were busy (tpu.runtime.tensorcore.dutycycle.percent / 100).", TPU_CHIP, "tpu_runtime"),
    MetricSpec("devctl_tpu_hbm_bandwidth_utilization_ratio", "gauge", "HBM bandwidth used of the chip's peak (tpu.runtime.hbm.utilization.percent / 100; newer libtpu only).", TPU_CHIP, "tpu_runtime"),
    MetricSpec("devctl_tpu_tensorcore_utilization_ratio", "gauge", "TensorCore utilization of the chip, its cores averaged (libtpu.sdk tensorcore_util / 100; only where libtpu is installed beside devctl and the host's TPU daemon answers).", TPU_CHIP, "tpu_runtime"),
    # The host.
    MetricSpec("devctl_headroom_bytes", "gauge", "The least memory a new JAX process (a device's usable memory) or a running job (its limit less its peak, bounded by the driver's free memory) can still get, and where.", ("where",), "publishers"),
    MetricSpec("devctl_host_memory_total_bytes", "gauge", "Host RAM (/proc/meminfo MemTotal).", (), "host"),
    MetricSpec("devctl_host_memory_available_bytes", "gauge", "Host RAM available (/proc/meminfo MemAvailable).", (), "host"),
    MetricSpec("devctl_host_shm_total_bytes", "gauge", "Size of /dev/shm (NCCL's and the publishers' shared memory).", (), "host"),
    MetricSpec("devctl_host_shm_used_bytes", "gauge", "Bytes used in /dev/shm.", (), "host"),
    # The exporter itself.
    MetricSpec("devctl", "info", "Versions of devctl, jax, jaxlib, the PJRT plugins and the NVIDIA driver.", ("devctl", "jax", "jaxlib", "plugins", "driver"), "versions"),
    MetricSpec("devctl_collect_success", "gauge", "1 when a source answered in this scrape, 0 when it failed or timed out (what it could not read is then absent, not zero).", ("source",)),
    MetricSpec("devctl_collect_duration_seconds", "gauge", "Seconds a source took in this scrape (the timeout when it did not answer).", ("source",)),
)
SOURCES: tuple[str, ...] = ("publishers", "probe", "nvml", "gpm", "tpu", "tpu_runtime", "host", "versions")


def exported_names() -> set[str]:
    """Every series name a scrape can carry (an info metric's with its _info suffix), for the dashboard's test."""
    return {f"{m.name}_info" if m.kind == "info" else m.name for m in METRICS}


@dataclass(frozen=True)
class Sample:
    name: str  # a MetricSpec's name
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class SourceResult:
    success: bool
    duration_s: float
    error: str | None = None


@dataclass(frozen=True)
class Collection:
    """One scrape's worth: every sample, and how each source did."""

    samples: list[Sample] = field(default_factory=list)
    sources: dict[str, SourceResult] = field(default_factory=dict)
