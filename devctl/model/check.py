"""`devctl check`: what was expected, what each check found, and what the health child measured.

Pure stdlib: the CLI builds and renders these without importing jax.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from devctl.model import json_schema
from devctl.model.bench_transfer import Cell

CHECK_SCHEMA = "devctl.check/1"

# In the order they run and print: software first, then what JAX sees, then what it can do and how fast (the
# benchmarks, run only when an expectation asks for them), then the machine.
CheckName = Literal[
    "versions", "plugins", "backends", "devices", "compute", "transfer", "memory", "bandwidth",
    "memory-bw", "matmul", "busbw", "stragglers", "busy", "nvml-health", "host", "tpu", "env",
]  # fmt: skip
CHECK_NAMES: tuple[CheckName, ...] = get_args(CheckName)
# With --distributed a check's name is followed by the process it ran on ("env [host1 process 3]"), or by
# [cluster] for a verdict about the processes together (stragglers among the hosts).
CLUSTER_WIDE = "cluster"
CHECK_NAME_PATTERN = "^(" + "|".join(CHECK_NAMES) + r")( \[(.+ process [0-9]+|" + CLUSTER_WIDE + r")\])?$"
_CLUSTER_NAME = re.compile(r"^(?P<check>\S+) \[(?P<host>.+) process (?P<index>[0-9]+)\]$")
_CLUSTER_WIDE_NAME = re.compile(r"^(?P<check>\S+) \[" + CLUSTER_WIDE + r"\]$")


def cluster_check_name(check: str, hostname: str, process_index: int | None) -> str:
    """The name of one process's check in a cluster report: "env [host1 process 3]" (JUnit and annotations show it
    whole); with no process, the verdict about them all: "stragglers [cluster]"."""
    return f"{check} [{CLUSTER_WIDE}]" if process_index is None else f"{check} [{hostname} process {process_index}]"


def split_check_name(name: str) -> tuple[str, str | None, int | None]:
    """(check, hostname, process index) of a report's check name; (name, None, None) for a one-host report,
    (check, "cluster", None) for a verdict about every process."""
    wide = _CLUSTER_WIDE_NAME.match(name)
    if wide is not None:
        return wide["check"], CLUSTER_WIDE, None
    found = _CLUSTER_NAME.match(name)
    if found is None:
        return name, None, None
    return found["check"], found["host"], int(found["index"])


# The shared work the checks read, each done once per run (Context in devctl.collect.check_context), by the
# key of CheckReport.phases_s; its time is not in any check's duration_s.
Phase = Literal["busy", "inventory", "environment", "health", "bench-memory", "bench-matmul", "bench-collective", "nvml", "hardware", "host"]
PHASES: tuple[Phase, ...] = get_args(Phase)
# A finding code, printed beside a problem by check, doctor and list: DEVCTL_FR_ and the id in upper case (docs/doctor.md: finding codes).
FINDING_CODE_PATTERN = "^DEVCTL_FR_[A-Z0-9_]+$"


# The checks that run only when an expectation of theirs is set: the Expectations fields and the flags that set
# them. Left unset, each is a skip that says only "not asked", and the table says them together in one line.
ASKED_BY: dict[str, tuple[tuple[str, ...], str]] = {
    "memory-bw": (("min_memory_bw_gbps",), "--min-memory-bw"),
    "matmul": (("min_tflops",), "--min-tflops"),
    "busbw": (("min_busbw_gbps",), "--min-busbw"),
    "stragglers": (("stragglers",), "--stragglers"),
    "busy": (("max_busy_percent", "min_busy_percent"), "--max-busy/--min-busy"),
}


class CheckStatus(str, enum.Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # could not run here, and nothing expected it to


@dataclass(frozen=True)
class Expectations:
    """What the job needs from this runner; None means "no expectation"."""

    platforms: tuple[str, ...] | None = None  # every one must initialize ("gpu" is cuda or rocm)
    min_devices: int | None = field(default=None, metadata=json_schema(minimum=1))
    device_kind: str | None = None  # case-insensitive substring of every device's kind, e.g. "H100"
    min_memory_bytes: int | None = field(default=None, metadata=json_schema(minimum=1))  # bytes_limit per device
    min_h2d_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s, host to each device
    min_memory_bw_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s, each device's memory (bench memory's copy)
    min_tflops: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # each device's dense matmul, bf16 on accelerators, f32 on CPU
    min_busbw_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s, all-reduce bus bandwidth over the local devices
    stragglers: bool = False  # expect no device (and, with --distributed, no host) slower than its peers
    # How busy each accelerator may be, read before check's own probes start (GPM's SM active, else NVML's
    # utilization; a TPU chip's duty cycle), in percent: no busier than max (nobody else is using it), no idler than min.
    max_busy_percent: float | None = field(default=None, metadata=json_schema(minimum=0, maximum=100))
    min_busy_percent: float | None = field(default=None, metadata=json_schema(minimum=0, maximum=100))
    timeout_s: float = field(default=30.0, metadata=json_schema(exclusiveMinimum=0))  # bound on each backend's initialization and on the health probe's silence
    sources: dict[str, str] = field(default_factory=dict)  # expectation -> "flag" or the config file it came from

    def wants_platform(self, *names: str) -> bool:
        """Whether any expected platform is one of `names` (with "gpu" covering cuda and rocm)."""
        for p in self.platforms or ():
            if p in names or (p == "gpu" and {"cuda", "rocm", "gpu"} & set(names)):
                return True
        return False


@dataclass(frozen=True)
class CheckResult:
    """One named check's verdict."""

    name: str = field(metadata=json_schema(pattern=CHECK_NAME_PATTERN))  # a CheckName; with --distributed followed by the process: "env [host1 process 3]"
    status: CheckStatus
    message: str = field(metadata=json_schema(minLength=1))  # one line: what was found, with the values
    remediation: str | None = None  # what to run or set; None when nothing needs doing
    duration_s: float = field(default=0.0, metadata=json_schema(minimum=0))  # the check's own wall time; the shared probes it waited on are in the report's phases_s, not here
    # Open on purpose: each check puts the figures behind its own verdict here (per device, per GPU, per
    # variable), a different shape per check, for people and scripts to read; no program relies on one shape.
    details: dict[str, Any] = field(default_factory=dict)  # figures behind the verdict, per device or GPU; shape varies per check
    caused_by: str | None = field(default=None, metadata=json_schema(pattern=CHECK_NAME_PATTERN))  # the failed check this result follows from (skipped or failed because that one failed: no backend, so no device to run on); null when it stands on its own


@dataclass(frozen=True)
class CheckReport:
    """Named health checks. Exit status: 0 when status is pass or warn, 1 when fail, 2 for bad flags or config (no document)."""

    schema: str = field(metadata=json_schema(const=CHECK_SCHEMA))
    devctl_version: str
    timestamp: float
    hostname: str
    status: Literal["pass", "warn", "fail"]  # fail if any check failed (or warned, with strict); warn if any warned
    strict: bool  # warnings were counted as failures
    expectations: Expectations
    checks: list[CheckResult]
    phases_s: dict[str, float]  # seconds of each shared probe the checks read (inventory, environment, health, nvml, hardware, host), done once and in no check's duration_s; with --distributed the slowest process's
    elapsed_s: float = field(metadata=json_schema(minimum=0))

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
    h2d_cells: list[Cell]  # the short h2d run's `devctl bench transfer` cells
    bandwidth_error: str | None  # the bench could not run, and why
    failure: str | None  # the child did not finish: why, and during what
    elapsed_s: float
    unfinished: str | None = None  # the step it died or hung in: "import", "backend", "matmul", "sum", "h2d-d2h", "d2d", "bandwidth"
