"""The inventory: JAX backends and their devices, as `devctl list` reports them."""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from devctl.model import json_schema
from devctl.model.check import FINDING_CODE_PATTERN
from devctl.model.hardware import (
    AmdReport,
    HostInfo,
    NvmlReport,
    PciFunction,
    TpuReport,
)
from devctl.model.plugins import AttributeValue, PjrtApiVersion, PluginReport
from devctl.model.remedy import Remedy

SCHEMA = "devctl.list/1"


class BackendStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"  # raised an error
    TIMEOUT = "timeout"  # did not answer within --timeout and was killed
    CRASHED = "crashed"  # killed its process (segfault, abort)
    EXITED = "exited"  # ended its process with an exit status (XLA's flag parser, a plugin that calls exit())
    SKIPPED = "skipped"  # not attempted, with the reason in `error`


@dataclass(frozen=True)
class BackendInfo:
    """One JAX backend: whether it initialized, how long it took, and what to do when it did not."""

    platform: str
    status: BackendStatus
    error: str | None = None
    init_s: float | None = None
    platform_version: str | None = None
    pjrt_c_api_version: PjrtApiVersion | None = None  # None when not a PJRT C API plugin
    runtime_type: str | None = None
    device_count: int = field(default=0, metadata=json_schema(minimum=0))
    priority: int | None = None  # JAX's: the highest initialized backend is the default
    fail_quietly: bool = False  # JAX ignores this backend's failure unless JAX_PLATFORMS names it
    plugin: str | None = None  # the plugin package or env entry that failed before providing a backend
    source: str | None = None  # "env" for a PJRT_NAMES_AND_LIBRARY_PATHS entry
    hint: str | None = None  # what to do, one line (devctl.checks.advice)
    code: str | None = field(default=None, metadata=json_schema(pattern=FINDING_CODE_PATTERN))  # the finding code of that advice (docs/doctor.md: finding codes)
    summary: str | None = None  # what is wrong, in the machine's terms (the error says it in the library's)
    remedies: list[Remedy] = field(default_factory=list)  # `hint` as data: each way it offers (model.remedy)

    @property
    def skipped_quietly(self) -> bool:
        """A backend JAX tries on every machine and skips without a word where it cannot start (a TPU without a
        chip): tables say "no TPU" and keep its error for --json."""
        return self.status is BackendStatus.SKIPPED and self.fail_quietly

    @classmethod
    def from_event(cls, e: dict[str, Any]) -> BackendInfo:
        return cls(
            platform=e["platform"],
            status=BackendStatus(e["status"]),
            error=e.get("error"),
            init_s=e.get("init_s"),
            platform_version=e.get("platform_version"),
            pjrt_c_api_version=_pjrt_version(e.get("pjrt_c_api_version")),
            runtime_type=e.get("runtime_type"),
            device_count=len(e.get("devices") or []),
            priority=e.get("priority"),
            fail_quietly=bool(e.get("fail_quietly")),
        )

    @classmethod
    def from_plugin_event(cls, e: dict[str, Any]) -> BackendInfo:
        return cls(
            platform=e["name"], status=BackendStatus.FAILED, error=e.get("error"), init_s=e.get("init_s"),
            plugin=e.get("module") or e["name"], source=e.get("source"),
        )  # fmt: skip


def _pjrt_version(value: dict[str, int] | None) -> PjrtApiVersion | None:
    return PjrtApiVersion(value["major"], value["minor"]) if value else None


@dataclass(frozen=True)
class JaxOutcome:
    """What `import jax; jax.devices()` does under the environment devctl ran in, predicted from its probe."""

    # "exits": the process ends with an exit status inside jax.devices() (XLA's flag parser on a bad XLA_FLAGS),
    # nothing to catch; "crashes": a signal ends it. "unknown" with `reason`.
    result: str = field(metadata=json_schema(enum=("ok", "raises", "exits", "crashes", "hangs", "unknown")))
    default_backend: str | None = None
    device_count: int = field(default=0, metadata=json_schema(minimum=0))  # devices of the default backend
    error: str | None = None  # what jax.devices() raises, `Type: message` as JAX words it; or how it dies
    culprit: str | None = None  # the backend, plugin or PJRT_NAMES_AND_LIBRARY_PATHS entry responsible
    reason: str | None = None  # why the result is "unknown"
    # When it fails: the finding code, what is wrong and what fixes it (devctl.checks.advice).
    code: str | None = field(default=None, metadata=json_schema(pattern=FINDING_CODE_PATTERN))
    summary: str | None = None
    fix: str | None = None
    fix_env: dict[str, str | None] | None = None  # the fix as an environment change (None: unset the variable)
    remedies: list[Remedy] = field(default_factory=list)  # the fix as data: each way it offers (model.remedy)

    @property
    def fails(self) -> bool:
        return self.result in ("raises", "exits", "crashes", "hangs")


class DeviceAttributes(TypedDict, total=False):
    """The device attributes devctl reads where the backend has them; each value as the backend gives it."""

    coords: AttributeValue  # TPU: the chip's position in the slice
    core_on_chip: AttributeValue
    slice_index: AttributeValue
    num_cores: AttributeValue
    compute_capability: AttributeValue  # CUDA, e.g. "9.0"
    core_count: AttributeValue
    device_vendor: AttributeValue
    pci_bus_id: str  # CUDA: "0000:18:00.0", asked of the driver where JAX does not say


class MatchedGpu(TypedDict):
    """The NVML GPU a CUDA device is, matched by PCI bus id."""

    index: int  # NVML's
    name: str | None
    uuid: str | None
    pci_bus_id: str | None


@dataclass(frozen=True)
class DeviceInfo:
    """One JAX device, as `devctl list` reports it."""

    id: int
    platform: str
    device_kind: str
    process_index: int
    local_hardware_id: int | None = None
    memory_kinds: list[str] | None = None
    default_memory_kind: str | None = None
    # memory_stats() as the backend returns it (-1 turned into None); None: the backend does not implement it.
    # The keys are the backend's own (PJRT allocators report about 15), so they stay open.
    memory_stats: dict[str, int | None] | None = None
    attributes: DeviceAttributes = field(default_factory=DeviceAttributes)  # TPU coords/core, GPU compute capability...
    nvml_gpu: MatchedGpu | None = None  # the matching NVML GPU on CUDA devices (by PCI bus id)

    @classmethod
    def from_event(cls, e: dict[str, Any]) -> DeviceInfo:
        # Field by field, unchecked: what a backend says is shown as it is, never a reason to fail.
        return cls(
            id=e["id"],
            platform=e["platform"],
            device_kind=e["device_kind"],
            process_index=e["process_index"],
            local_hardware_id=e.get("local_hardware_id"),
            memory_kinds=e.get("memory_kinds"),
            default_memory_kind=e.get("default_memory_kind"),
            memory_stats=e.get("memory_stats"),
            attributes=typing.cast(DeviceAttributes, e.get("attributes") or {}),
        )

    @property
    def memory_stats_keys(self) -> list[str]:
        return list(self.memory_stats) if self.memory_stats else []


@dataclass(frozen=True)
class UnusedAccelerator:
    """Hardware present on the machine that no initialized JAX backend is using."""

    kind: Literal["nvidia-gpu", "tpu-chip", "amd-gpu"]
    name: str
    location: str  # PCI address, device node or NVML index
    reason: str  # why JAX does not use it, in one line


@dataclass(frozen=True)
class Hardware:
    """Accelerators on the machine as discovery sees them, whether or not JAX uses them."""

    nvidia: NvmlReport
    nvidia_device_nodes: list[str]  # /dev/nvidia* present
    nvidia_pci: list[PciFunction]  # GPUs on the bus, with or without a driver
    tpu: TpuReport
    amd: AmdReport


@dataclass(frozen=True)
class Inventory:
    """`devctl list`: JAX's backends and devices beside the hardware, plugins and host discovery finds."""

    schema: str = field(metadata=json_schema(const=SCHEMA))
    devctl_version: str
    timestamp: float
    hostname: str
    jax_version: str | None
    jaxlib_version: str | None
    default_platform: str | None
    backends: list[BackendInfo]
    devices: list[DeviceInfo]
    unused_accelerators: list[UnusedAccelerator]
    plugins: list[PluginReport]
    host: HostInfo
    hardware: Hardware
    elapsed_s: float
    notes: list[str] = field(default_factory=list)
    # What `import jax; jax.devices()` does under this environment, predicted from devctl's probe; None where
    # no prediction was made (a --distributed process's own probe).
    jax_outcome: JaxOutcome | None = None
    # What --platform asked for ("gpu" is any of cuda, rocm and oneapi); None: every platform JAX would try.
    platforms: list[str] | None = None

    @property
    def missing_platforms(self) -> list[str]:
        """The platforms --platform asked for that no backend here starts: what `list` then exits 1 for."""
        ok = {b.platform for b in self.backends if b.status is BackendStatus.OK}
        return [p for p in self.platforms or () if not ok.intersection(_GPU_PLATFORMS if p == "gpu" else (p,))]


# What "gpu" means to --platform, as to JAX's expand_platform_alias.
_GPU_PLATFORMS = ("cuda", "rocm", "oneapi")
