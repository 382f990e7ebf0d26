"""`devctl check`: what was expected, what each check found, and what the health child measured.

Pure stdlib: the CLI builds and renders these without importing jax.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

CHECK_SCHEMA = "devctl.check/1"


class CheckStatus(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # could not run here, and nothing expected it to


@dataclass(frozen=True)
class Expectations:
    """What the job needs from this runner; None means "no expectation"."""

    platforms: tuple[str, ...] | None = None  # every one must initialize ("gpu" is cuda or rocm)
    min_devices: int | None = None
    device_kind: str | None = None  # case-insensitive substring of every device's kind, e.g. "H100"
    min_memory_bytes: int | None = None  # bytes_limit per device
    min_h2d_gbps: float | None = None  # decimal GB/s, host to each device
    timeout_s: float = 30.0  # bound on each backend's initialization and on the health probe's silence
    sources: dict[str, str] = field(default_factory=dict)  # expectation -> "flag" or the config file it came from

    def wants_platform(self, *names: str) -> bool:
        """Whether any expected platform is one of `names` (with "gpu" covering cuda and rocm)."""
        for p in self.platforms or ():
            if p in names or (p == "gpu" and {"cuda", "rocm", "gpu"} & set(names)):
                return True
        return False


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: CheckStatus
    message: str  # one line: what was found, with the values
    remediation: str | None = None  # what to run or set; None when nothing needs doing
    duration_s: float = 0.0  # wall time from the check's start to its verdict, waits for shared probes included
    details: dict[str, Any] = field(default_factory=dict)  # figures behind the verdict, per device or GPU


@dataclass(frozen=True)
class CheckReport:
    schema: str
    devctl_version: str
    timestamp: float
    hostname: str
    status: str  # "pass", "warn" (warnings only, not --strict) or "fail"
    strict: bool
    expectations: Expectations
    checks: list[CheckResult]
    phases_s: dict[str, float]  # shared work the checks waited on: inventory, environment, health probe
    elapsed_s: float

    @property
    def exit_code(self) -> int:
        return 1 if self.status == "fail" else 0


@dataclass(frozen=True)
class DeviceTrial:
    """One health-probe test on one device, or on one ordered pair of devices."""

    test: str  # "matmul", "sum", "h2d-d2h" (round trip) or "d2d"
    device: str  # "cuda:0", or "cuda:0->cuda:1" for d2d
    platform: str
    ok: bool
    rel_error: float | None = None  # compute: |jax - numpy| relative to numpy's result
    tolerance: float | None = None
    size_bytes: int | None = None  # transfer: bytes sent
    error: str | None = None  # what went wrong, one line


@dataclass(frozen=True)
class HealthProbeResult:
    """What the health child measured; one child runs compute, transfer and the h2d bandwidth run."""

    platforms: tuple[str, ...]
    devices: tuple[str, ...]  # every device the child tested
    trials: list[DeviceTrial]
    h2d_cells: list[dict]  # `devctl bench transfer` cells (model.bench.Cell as dicts) of the short h2d run
    bandwidth_error: str | None  # the bench could not run, and why
    failure: str | None  # the child did not finish: why, and during what
    elapsed_s: float
    unfinished: str | None = None  # the step it died or hung in: "import", "backend", "matmul", "sum", "h2d-d2h", "d2d", "bandwidth"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory_bytes: int | None  # None: NVML does not say (MIG, or no permission)


@dataclass(frozen=True)
class GpuHealth:
    """NVML's health counters for one GPU; None with a reason in `unavailable` where the GPU does not say."""

    index: int
    name: str | None
    pci_bus_id: str | None
    ecc_uncorrected_volatile: int | None  # since the driver loaded
    ecc_uncorrected_aggregate: int | None  # lifetime
    retired_pages_double_bit: int | None  # pre-Ampere page retirement
    retired_pages_pending: bool | None  # a retirement waits for a reset
    remapped_rows_uncorrectable: int | None  # Ampere and newer
    remap_pending: bool | None  # a remap waits for a reset
    remap_failed: bool | None  # a remap failed: the GPU should be drained
    throttle_reasons: tuple[str, ...]  # active thermal or power slowdowns, by NVML's names
    temperature_c: int | None
    slowdown_threshold_c: int | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    processes: tuple[GpuProcess, ...]
    unavailable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NvmlHealth:
    status: str  # "ok" | "unavailable" (no driver or library: normal on CPU runners) | "error"
    reason: str | None
    gpus: tuple[GpuHealth, ...]
