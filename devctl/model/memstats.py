"""`devctl memstats`: the allocator view, the driver view and the host view of device memory, side by side."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, TypedDict

from devctl.model import json_schema
from devctl.model.publishers import PublisherSnapshot

SCHEMA = "devctl.memstats/1"


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
class MemDevice:
    """One device with every view devctl has of its memory."""

    key: str  # "cpu:0", "cuda:1", "nvml:3" (a GPU JAX does not use), "tpu-chip:0"
    source: Literal["jax", "nvml", "tpu-pci"]  # "jax": the probe's fresh client
    platform: str
    id: int | None  # JAX device id; None for hardware JAX does not use
    device_kind: str
    # Allocator view of a fresh JAX client: bytes_limit is what a new JAX process would get right now.
    # The keys are the backend's own (PJRT allocators report about 15), so they stay open.
    memory_stats: dict[str, int | None] | None
    bytes_limit: int | None
    peak_bytes_in_use: int | None
    headroom_bytes: int | None  # bytes_limit - peak_bytes_in_use
    driver: DriverMemory | None  # NVML's view; None for a device NVML does not see
    hbm_bytes: int | None  # TPU chip table
    holders: list[ChipHolder] = field(default_factory=list)  # processes holding a TPU chip
    status: str = "ok"  # or why a view is missing right now (a lost GPU, an NVML error)


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
    headroom_bytes: int | None = None


@dataclass(frozen=True)
class Headroom:
    """The working-memory threshold pipeline-parallel frameworks compute before resharding."""

    min_bytes: int | None  # min over devices (and publishers) of bytes_limit - peak_bytes_in_use
    where: str | None  # the device key (and pid) where the minimum occurs
    third_of_min_bytes: int | None  # one such framework's working-memory budget: a third of the minimum
    reason: str | None = None  # why it is unknown (no backend reports bytes_limit, e.g. CPU)


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
