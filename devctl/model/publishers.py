"""What running JAX jobs publish about themselves (`devctl.publish.publish`), as read back by devctl.

A job's allocator statistics exist only inside that job, so the job writes
snapshots into a per-user directory and devctl reads them. These classes are
the reader's view; the writer's JSON shape is documented in devctl/monitor.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA = "devctl.publisher/1"


@dataclass(frozen=True)
class PublishedDevice:
    """One local device of a publishing job."""

    id: int
    platform: str
    device_kind: str
    process_index: int
    live_bytes: int  # shape x itemsize of the live jax.Array shards on this device (replicas counted on each device)
    live_arrays: int  # live arrays with at least one shard on this device
    # memory_stats() as returned, -1 values turned into None; None when the
    # backend has none (CPU) or it failed, with the reason in memory_stats_error.
    memory_stats: dict[str, int | None] | None
    memory_stats_error: str | None = None


@dataclass(frozen=True)
class PublishedArray:
    """One of a job's largest live arrays."""

    shape: tuple[int, ...]
    dtype: str
    nbytes: int  # the whole (global) array
    local_bytes: int  # the shards held by this process, replicas included
    devices: tuple[int, ...]  # ids of the local devices holding a shard


@dataclass(frozen=True)
class PublisherSnapshot:
    pid: int
    command: tuple[str, ...]
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
