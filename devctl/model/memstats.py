"""`devctl memstats`: the allocator view, the driver view and the host view of device memory, side by side."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from devctl.model import json_schema
from devctl.model.busy import GpuBusy
from devctl.model.publishers import PublisherSnapshot

SCHEMA = "devctl.memstats/2"

# Which view bounds what a new JAX process can allocate on a device (`usable_bytes`), or what bounds a headroom.
UsableBound = Literal["allocator", "driver"]


class DriverMemory(TypedDict):
    """NVML's view of one GPU's memory."""

    index: int  # NVML's
    uuid: str | None
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None


class ChipHolder(TypedDict):
    """A process that holds a TPU chip's device path."""

    pid: int
    user: str | None
    command: str | None


@dataclass(frozen=True)
class TpuRuntimeChip:
    """libtpu's own figures for one TPU chip, from the runtime metrics service of the process that holds it
    (no `publish()` needed): `tpu.runtime.hbm.memory.{usage,total}.bytes` summed over the chip's TensorCores,
    `tpu.runtime.tensorcore.dutycycle.percent` and, from newer libtpu, `tpu.runtime.hbm.utilization.percent`."""

    pid: int
    port: int
    hbm_used_bytes: int | None
    hbm_total_bytes: int | None
    duty_cycle_percent: float | None  # the share of the last sampling period the TensorCores were busy, 0-100
    hbm_utilization_percent: float | None  # None where this libtpu does not serve it
    cores: int  # the service's devices (TensorCores) behind this chip's memory figures: 2 on v2 and v3
    # libtpu.sdk's tensorcore_util (from the host's TPU daemon), averaged over the chip's cores; None without
    # libtpu in devctl's environment or where the daemon gives none
    tensorcore_utilization_percent: float | None = None


@dataclass(frozen=True)
class TpuMetricsSource:
    """One TPU process asked for its runtime metrics, where, and what came of it."""

    pid: int
    port: int | None  # None: the process serves none
    port_source: str  # LIBTPU_INIT_ARGS, TPU_RUNTIME_METRICS_PORTS, TPU_PROCESS_ADDRESSES, or default (8431)
    # ok; absent (nothing listens: not a libtpu process yet, or metrics off); stalled (no answer within the
    # timeout); error (another gRPC failure); not-served (TPU_PROCESS_ADDRESSES=local); no-grpc (the
    # `tpu-metrics` extra is not installed)
    status: Literal["ok", "absent", "stalled", "error", "not-served", "no-grpc"]
    reason: str | None
    chips: list[str]  # the device keys its figures went to
    # Whether the process was seen listening on the port (its own sockets); None where its fds or
    # /proc/<pid>/net cannot be read. A process that does not listen there is not asked.
    port_verified: bool | None = None


@dataclass(frozen=True)
class MemDevice:
    """One device with every view devctl has of its memory."""

    key: str  # "cpu:0", "cuda:1", "nvml:3" (a GPU JAX does not use), "tpu-chip:0"
    source: Literal["jax", "nvml", "tpu-pci"]  # "jax": the probe's fresh client
    platform: str
    id: int | None  # JAX device id; None for hardware JAX does not use
    device_kind: str
    # The allocator view of the probe's fresh client: a new process's, with nothing in use. The keys are the
    # backend's own (PJRT allocators report about 15), so they stay open.
    memory_stats: dict[str, int | None] | None
    bytes_limit: int | None  # the allocator's limit for a new JAX process: a share of the total, whoever holds the rest
    # What a new JAX process can allocate here now: the smaller of bytes_limit and the driver's free memory.
    usable_bytes: int | None
    usable_bound: UsableBound | None  # which of the two that is
    # What is held on the device: the publishing jobs' allocators (their live arrays where the backend keeps no
    # statistics), else the driver's used memory; never the probe's own empty allocator.
    in_use_bytes: int | None
    in_use_source: Literal["jobs", "driver"] | None
    peak_bytes_in_use: int | None  # the publishing jobs' peaks, summed; None without one
    driver: DriverMemory | None  # NVML's view; None for a device NVML does not see
    hbm_bytes: int | None  # TPU chip table
    holders: list[ChipHolder] = field(default_factory=list)  # processes holding a TPU chip
    status: str = "ok"  # or why a view is missing right now (a lost GPU, an NVML error)
    busy: GpuBusy | None = None  # an NVIDIA GPU's: GPM counters over a window, else NVML's utilization
    runtime: TpuRuntimeChip | None = None  # a TPU chip's figures from its holder's libtpu


@dataclass(frozen=True)
class MemProcess:
    """A process that holds device memory, from NVML, a publisher or a TPU device path."""

    pid: int
    source: Literal["nvml", "publisher", "tpu"]
    user: str | None
    command: str | None
    device: str  # the MemDevice key
    used_bytes: int | None  # NVML's per-process memory, or the publisher's live array bytes
    pid_visible: bool = True
    # From a publisher: the job's own allocator view of that device (keys as its backend chose them).
    memory_stats: dict[str, int | None] | None = None
    live_arrays: int | None = None
    headroom_bytes: int | None = None  # a job's: bytes_limit - peak_bytes_in_use, bounded by the driver's free memory


@dataclass(frozen=True)
class Headroom:
    """The working-memory threshold pipeline-parallel frameworks compute before resharding: the least memory that a
    new JAX process (on any device) or a publishing job (within its allocator) can still get."""

    min_bytes: int | None  # min over devices' usable_bytes and the publishing jobs' headroom_bytes
    where: str | None  # the device key (and pid) where the minimum occurs
    third_of_min_bytes: int | None  # one such framework's working-memory budget: a third of the minimum
    reason: str | None = None  # why it is unknown (no backend reports bytes_limit, e.g. CPU)
    # What the minimum is: a new process's share by the allocator's limit or by the driver's free memory, or a job's.
    bound: Literal["allocator", "driver", "job"] | None = None


@dataclass(frozen=True)
class HostMemory:
    """The host's memory and /dev/shm, from /proc/meminfo and statvfs."""

    total_bytes: int | None
    available_bytes: int | None
    used_bytes: int | None
    swap_total_bytes: int | None
    swap_used_bytes: int | None
    shm_total_bytes: int | None
    shm_used_bytes: int | None


@dataclass(frozen=True)
class SiteGrowth:
    """A line of the job's program whose live arrays grew while the job's memory did."""

    site: str | None
    arrays: int  # live arrays created there, more (or fewer) than before
    nbytes: int  # their bytes, more than before


@dataclass(frozen=True)
class Leak:
    """A publishing job whose live arrays (count or bytes) grew across every one of the last `samples` samples of
    `memstats --watch` without ever falling back: memory it may never give back."""

    pid: int
    command: str
    samples: int = field(metadata=json_schema(minimum=2))
    arrays_from: int
    arrays_to: int
    bytes_from: int
    bytes_to: int
    growing_sites: list[SiteGrowth] = field(default_factory=list)  # the lines whose totals grew, most bytes first; empty when the job did not say
    sites_note: str | None = None  # why no site is named


@dataclass(frozen=True)
class MemSnapshot:
    """`devctl memstats`: every device's memory from every view, the processes holding it, and the headroom."""

    schema: str = field(metadata=json_schema(const=SCHEMA))
    timestamp: float
    hostname: str
    devices: list[MemDevice]
    processes: list[MemProcess]
    publishers: list[PublisherSnapshot]  # the running jobs that publish their own view
    headroom: Headroom
    host: HostMemory
    problems: list[str]  # transient faults: NVML errors, corrupt snapshots, a lost GPU
    notes: list[str]
    leaks: list[Leak] = field(default_factory=list)  # --watch: jobs whose live arrays only grew over --leak-samples samples
    tpu_runtime: list[TpuMetricsSource] = field(default_factory=list)  # each TPU process asked for libtpu's metrics


def headroom(devices: list[MemDevice], processes: list[MemProcess]) -> Headroom:
    """The least that anything here can still get: a new JAX process on each device (its usable memory), and each
    publishing job within its allocator (bounded by the driver's free memory)."""
    candidates: list[tuple[int, str, Literal["allocator", "driver", "job"]]] = [
        (d.usable_bytes, d.key, d.usable_bound) for d in devices if d.usable_bytes is not None and d.usable_bound is not None
    ]
    candidates += [(p.headroom_bytes, f"{p.device} (pid {p.pid})", "job") for p in processes if p.headroom_bytes is not None]
    if not candidates:
        return Headroom(None, None, None, "no device reports bytes_limit or the driver's free memory (CPU has no allocator statistics)")
    value, where, bound = min(candidates, key=lambda c: (c[0], c[1]))
    return Headroom(value, where, value // 3, bound=bound)


def usable_memory(bytes_limit: int | None, driver_free_bytes: int | None) -> tuple[int | None, UsableBound | None]:
    """What a new JAX process can allocate on a device now, and which view bounds it.

    The allocator's bytes_limit is a share of the device's total memory (XLA_PYTHON_CLIENT_MEM_FRACTION, 75% on a
    GPU), whatever other processes hold: on an H200 where another process held 106 GiB of 140 GiB, bytes_limit said
    104.9 GiB while a second process could allocate about 30 GiB, the driver's 34.4 GiB free less its own context.
    So the smaller of the two; either alone where the other is unknown (no NVML; no allocator statistics)."""
    if driver_free_bytes is None:
        return (bytes_limit, "allocator") if bytes_limit is not None else (None, None)
    if bytes_limit is None or driver_free_bytes < bytes_limit:
        return driver_free_bytes, "driver"
    return bytes_limit, "allocator"


def job_headroom_bytes(stats: dict[str, int | None] | None, driver_free_bytes: int | None) -> int | None:
    """What a running job can still allocate on a device: its allocator's bytes_limit less its peak, but no more than
    its pool's unused part plus the driver's free memory (a job that did not preallocate grows only into what the
    driver has left). None without bytes_limit and peak_bytes_in_use (CPU)."""
    stats = stats or {}
    limit, peak = _bytes(stats.get("bytes_limit")), _bytes(stats.get("peak_bytes_in_use"))
    if limit is None or peak is None:
        return None
    own = max(0, limit - peak)
    if driver_free_bytes is None:
        return own
    pool, in_use = _bytes(stats.get("pool_bytes")), _bytes(stats.get("bytes_in_use"))
    slack = max(0, pool - in_use) if pool is not None and in_use is not None else 0
    return min(own, slack + driver_free_bytes)


def _bytes(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
