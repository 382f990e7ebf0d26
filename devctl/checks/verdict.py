"""What a check function returns; the runner adds its name and duration."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from devctl.model.check import CheckStatus


@dataclass(frozen=True)
class Verdict:
    status: CheckStatus
    message: str
    remediation: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # The check whose failure this verdict follows from (no backend, so no device to run on). The runner keeps
    # it only when that check ran and failed; the table then shows this one under it instead of as a row of its own.
    caused_by: str | None = None


def passed(message: str, **details: Any) -> Verdict:
    return Verdict(CheckStatus.PASS, message, None, details)


def warned(message: str, remediation: str | None, **details: Any) -> Verdict:
    return Verdict(CheckStatus.WARN, message, remediation, details)


def failed(message: str, remediation: str | None, **details: Any) -> Verdict:
    return Verdict(CheckStatus.FAIL, message, remediation, details)


def skipped(message: str, **details: Any) -> Verdict:
    return Verdict(CheckStatus.SKIP, message, None, details)


def because(cause: str, verdict: Verdict) -> Verdict:
    """`verdict`, said to follow from the check `cause` failing."""
    return replace(verdict, caused_by=cause)


def worst(verdicts: list[Verdict]) -> CheckStatus:
    order = [CheckStatus.FAIL, CheckStatus.WARN, CheckStatus.PASS, CheckStatus.SKIP]
    return min((v.status for v in verdicts), key=order.index, default=CheckStatus.PASS)


def join(parts: list[str], limit: int = 3, sep: str = "; ") -> str:
    """'a; b; c (and 4 more)': keeps a message to one readable line, and says what it left out."""
    shown = sep.join(parts[:limit])
    return shown + (f" (and {len(parts) - limit} more)" if len(parts) > limit else "")
