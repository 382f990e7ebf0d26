"""`devctl check --distributed`: every host's checks in one report, each case named with its host."""

from __future__ import annotations

import time
from typing import Any, Literal

from devctl.model.check import (
    CHECK_SCHEMA,
    CheckReport,
    CheckResult,
    CheckStatus,
    Expectations,
    cluster_check_name,
)
from devctl.version import __version__


def merge_reports(reports: list[dict[str, Any]], *, strict: bool, expectations: Expectations, elapsed_s: float) -> CheckReport:
    """One CheckReport from every process's `devctl.check/1` document (list position = process index).

    Each case is named `check [hostname process i]` (model.check.cluster_check_name), so a JUnit reader or a
    person sees which host failed; the cluster fails when any host does. Each shared probe's time is the
    slowest process's: the one the cluster waited for.
    """
    checks: list[CheckResult] = []
    phases_s: dict[str, float] = {}
    for index, doc in enumerate(reports):
        host = doc.get("hostname") or "?"
        for phase, seconds in (doc.get("phases_s") or {}).items():
            phases_s[phase] = max(phases_s.get(phase, 0.0), seconds)
        for c in doc.get("checks", []):
            checks.append(
                CheckResult(
                    name=cluster_check_name(c["name"], host, index),
                    status=CheckStatus(c["status"]),
                    message=c["message"],
                    remediation=c.get("remediation"),
                    duration_s=c.get("duration_s") or 0.0,
                    details={**(c.get("details") or {}), "check": c["name"], "hostname": host, "process_index": index},
                )
            )
    statuses = {doc.get("status") for doc in reports}
    status: Literal["pass", "warn", "fail"] = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
    hosts = sorted({doc.get("hostname") or "?" for doc in reports})
    return CheckReport(
        schema=CHECK_SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=f"{len(reports)} processes on {', '.join(hosts)}",
        status=status,
        strict=strict,
        expectations=expectations,
        checks=checks,
        phases_s=phases_s,
        elapsed_s=elapsed_s,
    )
