"""What holds a job's memory: its largest live arrays with their allocation sites, the same grouped by site
(`devctl memstats --pid PID --top N`), and the post-mortem a job leaves when it runs out of memory
(`devctl memstats --postmortem`). Written by the job's publisher (devctl.publish.holders), read by devctl.

Pure stdlib: the CLI builds and renders these without jax.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from devctl.model import json_schema

TOP_SCHEMA = "devctl.memstats.top/1"
POSTMORTEM_SCHEMA = "devctl.memstats.postmortem/1"
POSTMORTEMS_SCHEMA = "devctl.memstats.postmortems/1"
# A post-mortem outlives its job this long, then the next publisher in the directory removes it; at most
# POSTMORTEMS_KEPT are kept (the newest), each at most POSTMORTEM_MAX_BYTES.
POSTMORTEM_MAX_AGE_S = 7 * 24 * 3600
POSTMORTEMS_KEPT = 10
POSTMORTEM_MAX_BYTES = 1 << 20
# What one answer may carry: the request's N is at most MAX_TOP; the sites are the largest MAX_SITES.
MAX_TOP = 1000
MAX_SITES = 200


@dataclass(frozen=True)
class HeldArray:
    """One live jax.Array of the job."""

    nbytes: int = field(metadata=json_schema(minimum=0))  # the whole (global) array: shape x itemsize
    shape: tuple[int, ...]
    dtype: str
    sharding: str  # as JAX prints it, at most 200 characters
    memory_kind: str | None  # "device", "pinned_host", ...; None where the backend has none
    devices: tuple[str, ...]  # "cpu:1", "cuda:0": every device holding a shard
    site: str | None  # where the program created it: "train.py:88 (init_state)"; None: JAX recorded no traceback


@dataclass(frozen=True)
class SiteTotal:
    """Every live array created at one line of the program."""

    site: str | None  # None: arrays without a traceback
    arrays: int = field(metadata=json_schema(minimum=1))
    nbytes: int = field(metadata=json_schema(minimum=0))


@dataclass(frozen=True)
class TopReport:
    """`devctl memstats --pid PID --top N`: what the job holds, answered by the job itself."""

    schema: str = field(metadata=json_schema(const=TOP_SCHEMA))
    pid: int
    command: tuple[str, ...]
    hostname: str
    timestamp: float  # when the job answered
    total_arrays: int = field(metadata=json_schema(minimum=0))  # live arrays, each counted once (a shard aliasing its parent is not another array)
    total_bytes: int = field(metadata=json_schema(minimum=0))
    arrays: tuple[HeldArray, ...]  # the N largest, largest first
    sites: tuple[SiteTotal, ...]  # every array grouped by its site, largest total first (at most MAX_SITES)
    cost_s: float = field(default=0.0, metadata=json_schema(minimum=0))  # the job's CPU time for the answer
    note: str | None = None


@dataclass(frozen=True)
class DeviceMemory:
    """One device's allocator at the moment the job ran out of memory."""

    device: str
    memory_stats: dict[str, int | None] | None


@dataclass(frozen=True)
class PostMortem:
    """What a job held when a JAX call raised RESOURCE_EXHAUSTED and the job did not catch it, and what the error
    says it asked for (requested_*, free_bytes, capacity_bytes: the files of an older devctl lack the last five,
    read as null)."""

    schema: str = field(metadata=json_schema(const=POSTMORTEM_SCHEMA))
    pid: int
    command: tuple[str, ...]
    hostname: str
    timestamp: float
    error: str  # the exception, its first 500 characters
    requested_bytes: int | None  # what the failed allocation asked for, from the message (devctl.model.oom)
    requested_device: str | None  # where: the job's device of the ordinal the message names ("gpu:0"); None when it names none
    devices: tuple[DeviceMemory, ...]
    total_arrays: int  # arrays whose buffers exist: one that was deleted, or whose computation failed, holds nothing
    total_bytes: int
    arrays: tuple[HeldArray, ...]  # the largest, with their sites
    sites: tuple[SiteTotal, ...]
    # True: requested_bytes is the message's byte count; False: a size as XLA prints it ("4.00TiB"), exact to its last digit.
    requested_exact: bool | None = None
    # "program": the TPU compiler's figure, all that the program needs in that memory, not one allocation.
    requested_scope: Literal["allocation", "program"] | None = None
    requested_memory: str | None = None  # "pinned_host" (CUDA's "Out of host memory"), "hbm"; None where the message does not say
    free_bytes: int | None = field(default=None, metadata=json_schema(minimum=0))  # what the message says was free (the TPU runtime)
    capacity_bytes: int | None = field(default=None, metadata=json_schema(minimum=0))  # what the message says the memory holds (the TPU compiler)
    path: str | None = None  # the file it was read from (set by the reader)


def requested_text(pm: PostMortem) -> str:
    """What the job asked for, as the post-mortem view and doctor say it: "asking for 4.0 TiB on gpu:0", "asking
    for 4.0 TiB" where the message names no device; "" where it says no size."""
    from devctl.units import format_bytes

    if pm.requested_bytes is None:
        return ""
    size = format_bytes(pm.requested_bytes)
    if pm.requested_scope == "program":
        of = f" of {format_bytes(pm.capacity_bytes)}" if pm.capacity_bytes is not None else ""
        return f"compiling a program that needs {size}{of} {pm.requested_memory or 'memory'}"
    where = f" on {pm.requested_device}" if pm.requested_device else " of pinned host memory" if pm.requested_memory == "pinned_host" else ""
    free = f" ({format_bytes(pm.free_bytes)} free)" if pm.free_bytes is not None else ""
    return f"asking for {size}{where}{free}"


@dataclass(frozen=True)
class PostMortemReport:
    """`devctl memstats --postmortem`: the post-mortems in the snapshot directory, newest first."""

    schema: str = field(metadata=json_schema(const=POSTMORTEMS_SCHEMA))
    directory: str
    postmortems: tuple[PostMortem, ...]
    problems: tuple[str, ...] = ()  # files that could not be read (damaged, foreign)


FLEET_TOP_SCHEMA = "devctl.memstats.top.distributed/1"


@dataclass(frozen=True)
class ProcessTops:
    """One process of the cluster: the answers of the publishing jobs it can see, and the jobs that did not answer."""

    process_index: int = field(metadata=json_schema(minimum=0))
    hostname: str
    tops: tuple[TopReport, ...]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class FleetArray:
    """One of the largest arrays of the whole cluster, and whose it is."""

    process_index: int = field(metadata=json_schema(minimum=0))
    hostname: str
    pid: int
    array: HeldArray


@dataclass(frozen=True)
class FleetSite:
    """One line of the program, over every job of the cluster (the same program runs on every host)."""

    site: str | None
    jobs: int = field(metadata=json_schema(minimum=1))
    arrays: int = field(metadata=json_schema(minimum=1))
    nbytes: int = field(metadata=json_schema(minimum=0))


@dataclass(frozen=True)
class FleetTopReport:
    """`devctl memstats --distributed --top N`: the largest arrays of every publishing job of every process."""

    schema: str = field(metadata=json_schema(const=FLEET_TOP_SCHEMA))
    processes: tuple[ProcessTops, ...]
    arrays: tuple[FleetArray, ...]  # the N largest over the cluster, largest first
    sites: tuple[FleetSite, ...]  # every job's lines, summed over the cluster, largest first
    total_arrays: int = 0
    total_bytes: int = 0
