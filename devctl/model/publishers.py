"""What running JAX jobs publish about themselves (`devctl.publish.publish`), as read back by devctl.

A job's allocator statistics exist only inside that job, so the job writes
snapshots into a per-user directory and devctl reads them. PublisherDocument
is the `devctl.publisher/1` document as the job writes it (devctl.publish.document;
its JSON Schema is generated from it); PublisherSnapshot and the rest are the
reader's view (devctl.discovery.snapshot_format checks every value before it
becomes one of their fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devctl.model import json_schema

SCHEMA = "devctl.publisher/1"
PCI_BUS_ID_PATTERN = r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$"


@dataclass(frozen=True)
class PublishedDevice:
    """One local device of a publishing job."""

    id: int = field(metadata=json_schema(minimum=0))
    platform: str
    device_kind: str
    process_index: int = field(metadata=json_schema(minimum=0))
    live_bytes: int = field(metadata=json_schema(minimum=0))  # shape x itemsize of the live jax.Array shards on this device (replicas counted on each device)
    live_arrays: int = field(metadata=json_schema(minimum=0))  # live arrays with at least one shard on this device
    # memory_stats() as returned, -1 values turned into None; None when the backend has none (CPU) or it
    # failed, with the reason in memory_stats_error. The keys are the backend's own, so they stay open.
    memory_stats: dict[str, int | None] | None
    memory_stats_error: str | None = None
    # A GPU's PCI bus id as its driver names it: what matches the job's device to the machine's GPU, whatever
    # CUDA_VISIBLE_DEVICES renumbered (eight jobs, each given one GPU, all call theirs gpu:0). None elsewhere.
    pci_bus_id: str | None = field(default=None, metadata=json_schema(pattern=PCI_BUS_ID_PATTERN))


@dataclass(frozen=True)
class PublishedArray:
    """One of a job's largest live arrays."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int = field(metadata=json_schema(minimum=0))  # the whole (global) array
    local_bytes: int = field(metadata=json_schema(minimum=0))  # the shards held by this process, replicas included
    devices: tuple[int, ...]  # ids of the local devices holding a shard


@dataclass(frozen=True)
class PublisherDocument:
    """A running JAX job's view of its own devices, as the job writes it (`devctl.publish.publish`): <pid>.json in
    the per-user snapshot directory, rewritten every interval."""

    schema: str = field(metadata=json_schema(const=SCHEMA))
    pid: int = field(metadata=json_schema(minimum=1))
    process_create_time: float | None  # psutil create_time(), to catch a reused pid; None without psutil
    command: list[str]  # sys.orig_argv: the full command line
    hostname: str
    timestamp: float  # unix seconds when the job took the snapshot
    interval_s: float | None = field(metadata=json_schema(exclusiveMinimum=0))  # None for a one-off snapshot() that no thread refreshes
    jax_version: str | None
    jaxlib_version: str | None
    backend_initialized: bool  # False: the job has not started JAX yet, so no devices are listed
    devices: list[PublishedDevice]
    largest_arrays: list[PublishedArray]  # the job's largest live arrays, largest first
    snapshot_s: float = field(metadata=json_schema(minimum=0))  # wall time the publisher spent building this snapshot
    error: str | None  # what failed in the publisher since its last snapshot, if anything


@dataclass(frozen=True)
class PublisherSnapshot:
    """A publisher's document as devctl read it: checked, bounded, and placed in time."""

    pid: int
    command: tuple[str, ...]  # the job's command line as a person reads it: printable, cut to 256 characters in all, ending with "…" when cut
    hostname: str
    timestamp: float  # unix seconds when the job took the snapshot
    interval_s: float | None  # None for a one-off snapshot() that no thread refreshes
    devices: tuple[PublishedDevice, ...]
    largest_arrays: tuple[PublishedArray, ...]
    error: str | None  # what went wrong in the publisher since its last snapshot
    process_create_time: float | None = None  # psutil create_time(), to catch a reused pid
    jax_version: str | None = None
    jaxlib_version: str | None = None
    backend_initialized: bool = True  # False: the job has not started JAX yet, so no devices are listed
    snapshot_s: float | None = None  # CPU-side cost of building this snapshot in the job
    path: str | None = None  # the file it was read from
    age_s: float | None = None  # reader's clock minus timestamp


@dataclass(frozen=True)
class PublisherProblem:
    """A snapshot file that could not be used: half-written, corrupt, another schema."""

    path: str
    reason: str


@dataclass(frozen=True)
class PublishersReport:
    directory: str  # where publishers write by default (or the directory asked for)
    publishers: tuple[PublisherSnapshot, ...]
    problems: tuple[PublisherProblem, ...] = ()
    removed_stale: tuple[int, ...] = ()  # pids whose stale snapshot files were removed
    directories: tuple[str, ...] = field(default=())  # every directory read, `directory` first
