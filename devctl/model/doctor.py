"""`devctl doctor`: the catalogue of known failures, what devctl sees, and the diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field

from devctl.model.check import CheckResult

DOCTOR_SCHEMA = "devctl.doctor/1"


@dataclass(frozen=True)
class KnownFailure:
    """One entry of the catalogue (reference/failure-modes.md)."""

    id: str  # stable, e.g. "tpu-held"
    number: int | None  # its number in the catalogue; None for devctl's own entries
    title: str
    cause: str
    fix: str
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class DiagnosisFinding:
    id: str  # KnownFailure.id
    catalogue_number: int | None
    title: str
    severity: str  # "error": JAX fails or leaves hardware unused; "warning": it runs, badly or at risk
    evidence: list[str]  # exact messages or facts, one per line
    cause: str
    fix: str  # the command or setting
    references: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # checks whose verdict this explains
    code: str | None = None  # stable finding code, DEVCTL_FR_<ID> (README: finding codes)


@dataclass(frozen=True)
class Overview:
    """What devctl sees and what JAX will use, as short lines for people and fields for programs."""

    sees: list[str]
    jax_will_use: list[str]
    default_platform: str | None
    device_count: int
    device_kinds: list[str]


@dataclass(frozen=True)
class DoctorReport:
    schema: str
    devctl_version: str
    timestamp: float
    hostname: str
    status: str  # "ok" or "problems"
    overview: Overview
    findings: list[DiagnosisFinding]
    checks: list[CheckResult]
    elapsed_s: float

    @property
    def exit_code(self) -> int:
        return 1 if self.findings else 0
