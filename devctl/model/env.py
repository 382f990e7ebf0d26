"""Versions of the installed JAX stack, their consistency, and the environment variables that matter."""

from __future__ import annotations

from dataclasses import dataclass, field

from devctl.model import json_schema
from devctl.model.hardware import CudaWheel
from devctl.model.plugins import FrameworkPjrt, PjrtApiVersion

SCHEMA = "devctl.env/1"

PACKAGE_ROLES = ("jax", "jaxlib", "plugin", "pjrt", "libtpu", "other")


@dataclass(frozen=True)
class PackageVersion:
    name: str  # distribution name as installed, e.g. "jax-cuda12-plugin"
    version: str | None  # None: not installed
    role: str = field(metadata=json_schema(enum=PACKAGE_ROLES))
    # jaxlib: the PJRT C API version it was built with; pjrt, libtpu: the version their library speaks.
    pjrt_api_version: PjrtApiVersion | None = None
    pjrt_check: str | None = None  # pjrt, libtpu: what jaxlib's plugin check says of the library
    pjrt_accepted: bool | None = None


@dataclass(frozen=True)
class PackageChange:
    name: str
    installed: str | None  # None: the fix adds it
    target: str  # a version, or a pin such as "0.0.42.*"


@dataclass(frozen=True)
class StackFix:
    """One command that puts jax, jaxlib, the plugins and libtpu at one release: jax's own pins for it."""

    command: str = field(metadata=json_schema(minLength=1))
    jax_version: str
    extras: list[str]  # the jax extras the command installs, e.g. ["cuda12-local"]
    changes: list[PackageChange] = field(default_factory=list)  # what the command changes
    summary: str = ""
    pip: list[str] = field(default_factory=list)  # the command as data: its arguments after `pip` (model.remedy)


@dataclass(frozen=True)
class EnvFinding:
    """One of `devctl env`'s findings: a version combination that JAX itself rejects or ignores."""

    severity: str = field(metadata=json_schema(enum=("error", "warning", "info")))  # "error": JAX refuses to start or to use the package; "warning": it may misbehave
    packages: list[str]
    message: str  # what JAX would say, or what is wrong
    remediation: str


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    meaning: str  # what this value does to JAX's device behaviour
    problem: str | None = None  # a value JAX rejects or ignores


@dataclass(frozen=True)
class EnvironmentReport:
    """`devctl env`: versions of the installed JAX stack, their consistency, and the environment variables that matter."""

    schema: str = field(metadata=json_schema(const=SCHEMA))
    devctl_version: str
    timestamp: float
    hostname: str
    python: str  # the running Python's version
    python_executable: str
    os: str  # platform.platform()
    packages: list[PackageVersion]
    cuda_wheels: list[CudaWheel]
    nvidia_driver: str | None  # the NVIDIA driver's version (NVML); None without one
    nvidia_cuda_driver_version: str | None  # the newest CUDA the driver supports, e.g. "12.4"
    findings: list[EnvFinding]
    env: list[EnvVar]
    notes: list[str]
    # jaxlib's own PJRT C API version and the rule its plugin check applies (xla/pjrt/pjrt_api.cc), asked of
    # jaxlib in a child process; None without jaxlib.
    framework_pjrt: FrameworkPjrt | None = None
    # The one command that fixes every version skew in findings (each such finding's remediation is this command); None when nothing is skewed.
    stack_fix: StackFix | None = None
    # What XLA's own flag parser refuses in XLA_FLAGS, in its words (it ends every JAX program with exit status 1);
    # None when it takes them all, or XLA_FLAGS is unset.
    xla_flags_refused: str | None = None
