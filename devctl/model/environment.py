"""Versions of the installed JAX stack, their consistency, and the environment variables that matter."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PackageVersion:
    name: str  # distribution name as installed, e.g. "jax-cuda12-plugin"
    version: str | None  # None: not installed
    role: str  # "jax", "jaxlib", "plugin", "pjrt", "libtpu", "cuda-wheel", "other"


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
