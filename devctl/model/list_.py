"""The inventory: JAX backends and their devices, as `devctl list` reports them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class BackendStatus(str, enum.Enum):
    OK = "ok"
    FAILED = "failed"  # raised an error
    TIMEOUT = "timeout"  # did not answer within --timeout and was killed
    CRASHED = "crashed"  # killed its process (segfault, abort)
    SKIPPED = "skipped"  # not attempted, with the reason in `error`


@dataclass(frozen=True)
class BackendInfo:
    platform: str
    status: BackendStatus
    error: str | None = None
    init_s: float | None = None
    platform_version: str | None = None
    pjrt_c_api_version: dict | None = None  # {"major": M, "minor": N}; None when not a PJRT C API plugin
    runtime_type: str | None = None
    device_count: int = 0
    priority: int | None = None
    fail_quietly: bool = False  # JAX ignores this backend's failure unless JAX_PLATFORMS names it
    plugin: str | None = None  # the plugin package or env entry that failed before providing a backend
    source: str | None = None  # "env" for a PJRT_NAMES_AND_LIBRARY_PATHS entry
    hint: str | None = None  # what to do, one line (devctl.checks.advice)
    code: str | None = None  # the finding code of that advice (README: finding codes)
    summary: str | None = None  # what is wrong, in the machine's terms (the error says it in the library's)

    @classmethod
    def from_event(cls, e: dict) -> BackendInfo:
        return cls(
            platform=e["platform"],
            status=BackendStatus(e["status"]),
            error=e.get("error"),
            init_s=e.get("init_s"),
            platform_version=e.get("platform_version"),
            pjrt_c_api_version=e.get("pjrt_c_api_version"),
            runtime_type=e.get("runtime_type"),
            device_count=len(e.get("devices") or []),
            priority=e.get("priority"),
            fail_quietly=bool(e.get("fail_quietly")),
        )

    @classmethod
    def from_plugin_event(cls, e: dict) -> BackendInfo:
        return cls(
            platform=e["name"], status=BackendStatus.FAILED, error=e.get("error"), init_s=e.get("init_s"),
            plugin=e.get("module") or e["name"], source=e.get("source"),
        )  # fmt: skip


@dataclass(frozen=True)
class JaxOutcome:
    """What `import jax; jax.devices()` does under the environment devctl ran in, predicted from its probe."""

    result: str  # "ok", "raises", "crashes", "hangs", or "unknown" (with `reason`)
    default_backend: str | None = None
    device_count: int = 0  # devices of the default backend
    error: str | None = None  # what jax.devices() raises, `Type: message` as JAX words it; or how it dies
    culprit: str | None = None  # the backend, plugin or PJRT_NAMES_AND_LIBRARY_PATHS entry responsible
    reason: str | None = None  # why the result is "unknown"
    code: str | None = None  # when it fails: the finding code, what is wrong and what fixes it (devctl.checks.advice)
    summary: str | None = None
    fix: str | None = None
    fix_env: dict[str, str | None] | None = None  # the fix as an environment change (None: unset the variable)

    @property
    def fails(self) -> bool:
        return self.result in ("raises", "crashes", "hangs")


@dataclass(frozen=True)
class DeviceInfo:
    id: int
    platform: str
    device_kind: str
    process_index: int
    local_hardware_id: int | None = None
    memory_kinds: list[str] | None = None
    default_memory_kind: str | None = None
    memory_stats: dict[str, Any] | None = None  # None: the backend does not implement memory_stats()
    attributes: dict[str, Any] = field(default_factory=dict)  # TPU coords/core, GPU compute capability...
    nvml_gpu: dict | None = None  # the matching NVML GPU on CUDA devices (by PCI bus id)

    @classmethod
    def from_event(cls, e: dict) -> DeviceInfo:
        return cls(
            id=e["id"],
            platform=e["platform"],
            device_kind=e["device_kind"],
            process_index=e["process_index"],
            local_hardware_id=e.get("local_hardware_id"),
            memory_kinds=e.get("memory_kinds"),
            default_memory_kind=e.get("default_memory_kind"),
            memory_stats=e.get("memory_stats"),
            attributes=e.get("attributes") or {},
        )

    @property
    def memory_stats_keys(self) -> list[str]:
        return list(self.memory_stats) if self.memory_stats else []


@dataclass(frozen=True)
class UnusedAccelerator:
    """Hardware present on the machine that no initialized JAX backend is using."""

    kind: str  # "nvidia-gpu", "tpu-chip", "amd-gpu"
    name: str
    location: str  # PCI address, device node or NVML index
    reason: str  # why JAX does not use it, in one line
