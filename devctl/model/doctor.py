"""`devctl doctor`: the catalogue of known failures, what devctl sees, and the diagnosis."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from devctl.model import json_schema
from devctl.model.check import CHECK_NAMES, FINDING_CODE_PATTERN, CheckResult
from devctl.model.list_ import JaxOutcome
from devctl.model.remedy import Remedy

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
class DoctorFinding:
    """A known failure `devctl doctor` found here, with the evidence."""

    id: str = field(metadata=json_schema(pattern="^[a-z0-9-]+$"))  # KnownFailure.id: stable catalogue id, e.g. "tpu-held"
    catalogue_number: int | None = field(metadata=json_schema(minimum=1))  # its number in failure-modes.md; None for devctl's own entries
    title: str
    # For what JAX uses, one rule: "error" when jax.devices() raises, exits, crashes or hangs; "warning" when JAX
    # works but not on the hardware this machine has; "info" otherwise (JAX runs on what is here). Other findings
    # (versions, the host) say how badly or at what risk it runs.
    severity: Literal["error", "warning", "info"]
    evidence: list[str] = field(metadata=json_schema(minItems=1))  # exact messages or facts, one per line
    cause: str
    fix: str  # the command or setting
    remedies: list[Remedy] = field(default_factory=list)  # `fix` as data: each way it offers (model.remedy); none for advice in words
    references: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # checks whose verdict this explains
    backends: list[str] = field(default_factory=list)  # backend and plugin rows (their platform in devctl list) whose failure this explains
    code: str = field(kw_only=True, metadata=json_schema(pattern=FINDING_CODE_PATTERN))  # stable finding code, DEVCTL_FR_<ID> (docs/doctor.md: finding codes)


@dataclass(frozen=True)
class Overview:
    """What devctl sees and what JAX will use, as short lines for people and fields for programs."""

    sees: list[str]
    jax_will_use: list[str]
    default_platform: str | None
    device_count: int = field(metadata=json_schema(minimum=0))
    device_kinds: list[str]
    jax_outcome: JaxOutcome | None = None  # what jax.devices() does: devctl list's prediction, with its one fix


@dataclass(frozen=True)
class DoctorReport:
    """What devctl sees, what JAX will use, and every known failure found. Exit status 1 when a finding is an error
    or a warning, else 0 (info findings say what JAX skips where that changes nothing here)."""

    # doctor runs on one host: its checks' names are bare CheckNames, never followed by a process.
    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "allOf": [{"properties": {"checks": {"items": {"properties": {"name": {"enum": list(CHECK_NAMES)}}}}}}]
    }

    schema: str = field(metadata=json_schema(const=DOCTOR_SCHEMA))
    devctl_version: str
    timestamp: float
    hostname: str
    status: Literal["ok", "problems"]
    overview: Overview
    findings: list[DoctorFinding]
    checks: list[CheckResult]
    elapsed_s: float = field(metadata=json_schema(minimum=0))

    @property
    def problems(self) -> list[DoctorFinding]:
        return [f for f in self.findings if f.severity != "info"]

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0
