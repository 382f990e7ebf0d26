"""Versions of the installed JAX stack, their consistency, and the environment variables that matter."""

from __future__ import annotations

from dataclasses import dataclass, field

from devctl.model.plugins import PjrtApiVersion


@dataclass(frozen=True)
class PackageVersion:
    name: str  # distribution name as installed, e.g. "jax-cuda12-plugin"
    version: str | None  # None: not installed
    role: str  # "jax", "jaxlib", "plugin", "pjrt", "libtpu", "cuda-wheel", "other"
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

    command: str
    jax_version: str
    extras: list[str]  # the jax extras the command installs, e.g. ["cuda12-local"]
    changes: list[PackageChange] = field(default_factory=list)  # what the command changes
    summary: str = ""


@dataclass(frozen=True)
class VersionFinding:
    """A version combination that JAX itself rejects or ignores."""

    severity: str  # "error": JAX refuses to start or to use the package; "warning": it may misbehave
    packages: list[str]
    message: str  # what JAX would say, or what is wrong
    remediation: str


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    meaning: str  # what this value does to JAX's device behaviour
    problem: str | None = None  # a value JAX rejects or ignores
