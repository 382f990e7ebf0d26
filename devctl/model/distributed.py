"""One view of every process of a JAX cluster: `devctl list --distributed` and `devctl memstats --distributed`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from devctl.model import json_schema
from devctl.model.list_ import DeviceInfo, Inventory
from devctl.model.memstats import MemDevice, MemSnapshot

LIST_SCHEMA = "devctl.list.distributed/2"
MEMSTATS_SCHEMA = "devctl.memstats.distributed/2"

# The single-host command a cluster report gathers, and its device record: devctl list's or devctl memstats'.
ReportT = TypeVar("ReportT", Inventory, MemSnapshot)
DeviceT = TypeVar("DeviceT", DeviceInfo, MemDevice)

CLUSTER_FINDING_CODES = ("version-mismatch", "device-kind-mismatch", "device-count-mismatch", "driver-mismatch", "not-multi-process")
# A ProcessSummary field's value, as a ClusterFinding quotes it: a version, a count, device kinds, plugin versions.
FieldValue = str | int | list[str] | dict[str, str] | None


@dataclass(frozen=True)
class ClusterParams:
    """How this process joins the cluster; None leaves the value to JAX's own auto-detection."""

    coordinator: str | None  # "host:port" of process 0's coordination service
    num_processes: int | None
    process_id: int | None

    @property
    def explicit(self) -> bool:
        return None not in (self.coordinator, self.num_processes, self.process_id)


@dataclass(frozen=True)
class Joined:
    """What the distributed runtime told this process when it joined."""

    process_index: int
    num_processes: int
    coordinator: str | None


@dataclass(frozen=True)
class ProcessSummary:
    """One row of the hosts table: what a process has, and the versions it runs."""

    process_index: int = field(metadata=json_schema(minimum=0))
    hostname: str
    device_count: int = field(metadata=json_schema(minimum=0))  # this process's own devices on the default backend (what jax.local_devices() returns)
    device_kinds: list[str]  # distinct, sorted
    default_platform: str | None
    # Installed versions (package metadata, what pip installed); None: not installed.
    jax_version: str | None
    jaxlib_version: str | None
    libtpu_version: str | None
    plugin_versions: dict[str, str]  # jax-cuda12-plugin, jax-cuda12-pjrt, ...
    driver_version: str | None  # NVIDIA driver (NVML); None without NVML
    # Devices the default backend on this process sees across the whole cluster; equal to
    # device_count when the backend has no multi-process support here.
    global_device_count: int | None = field(metadata=json_schema(minimum=0))
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ClusterDevice(Generic[DeviceT]):
    """One device of one process, with the process that owns it."""

    process_index: int = field(metadata=json_schema(minimum=0))  # the distributed process that reported it
    hostname: str
    key: str  # "cpu:2048", "cuda:3", "tpu-chip:0", as in the single-host commands
    platform: str
    id: int | None  # JAX's global device id; None for hardware JAX does not use
    device_kind: str
    jax_process_index: int | None  # JAX's own view; differs from process_index on a backend without multi-process support
    bytes_limit: int | None  # the allocator's limit for a new JAX process
    peak_bytes_in_use: int | None  # the publishing jobs' peaks (memstats); None otherwise
    usable_bytes: int | None  # what a new JAX process can allocate on it now: bytes_limit, bounded by the driver's free memory
    detail: DeviceT  # the device record of the single-host command (devctl list or devctl memstats)


@dataclass(frozen=True)
class ClusterFinding:
    """Processes that differ from the rest of the cluster, named."""

    # (`dataclasses.field` in full here: this class has a field named `field`.)
    code: str = dataclasses.field(metadata=json_schema(enum=CLUSTER_FINDING_CODES))
    severity: str = dataclasses.field(metadata=json_schema(enum=("error", "warning")))
    field: str | None  # the ProcessSummary field compared
    message: str  # one line, naming hosts and process indices
    processes: list[int] = dataclasses.field(metadata=json_schema(items={"minimum": 0}))  # the odd ones out
    hostnames: list[str]  # parallel to processes
    values: list[FieldValue]  # their values, parallel to processes
    majority_value: FieldValue = None  # what most processes have; None when there is no majority
    hint: str | None = None


@dataclass(frozen=True)
class ClusterHeadroom:
    """The least memory anything can still get on any process: a new JAX process on a device (its usable memory),
    or a publishing job within its allocator (memstats)."""

    min_bytes: int | None
    process_index: int | None
    hostname: str | None
    where: str | None  # the device key (and pid, for a publishing job) on that process
    third_of_min_bytes: int | None
    reason: str | None = None  # why it is unknown (no device reports allocator statistics, e.g. CPU)


@dataclass(frozen=True)
class ClusterReport(Generic[ReportT, DeviceT]):
    """Every process of a JAX cluster, assembled on process 0."""

    schema: str = field(metadata=json_schema(enum=[LIST_SCHEMA, MEMSTATS_SCHEMA]))
    devctl_version: str
    timestamp: float
    coordinator: str | None
    num_processes: int = field(metadata=json_schema(minimum=1))
    processes: list[ProcessSummary]
    devices: list[ClusterDevice[DeviceT]]
    findings: list[ClusterFinding]
    headroom: ClusterHeadroom
    reports: list[ReportT]  # every process's own single-host document (devctl.list/1 or devctl.memstats/2)
    elapsed_s: float = field(metadata=json_schema(minimum=0))  # on process 0, from the start to the assembled cluster
    join_s: float | None = field(metadata=json_schema(minimum=0))  # on process 0, waiting for every process to join (the last one to start sets it)
    gather_s: float | None = field(metadata=json_schema(minimum=0))  # on process 0, from sharing its report to having every report


# The two documents: `devctl list --distributed` and `devctl memstats --distributed`.
ListClusterReport = ClusterReport[Inventory, DeviceInfo]
MemstatsClusterReport = ClusterReport[MemSnapshot, MemDevice]
# A cluster report's parts per schema id: what process 0 rebuilds every process's report and device records as.
CLUSTER_PARTS: dict[str, tuple[type[Inventory | MemSnapshot], type[DeviceInfo | MemDevice]]] = {
    LIST_SCHEMA: (Inventory, DeviceInfo),
    MEMSTATS_SCHEMA: (MemSnapshot, MemDevice),
}
