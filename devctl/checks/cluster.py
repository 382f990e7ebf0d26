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
)
from devctl.version import __version__


def merge_reports(reports: list[dict[str, Any]], *, strict: bool, expectations: Expectations, elapsed_s: float) -> CheckReport:
    """One CheckReport from every process's `devctl.check/1` document (list position = process index).

    Each case is named `check [hostname process i]`, so a JUnit reader or a
    person sees which host failed; the cluster fails when any host does.
    """
    checks: list[CheckResult] = []
    for index, doc in enumerate(reports):
        host = doc.get("hostname") or "?"
        for c in doc.get("checks", []):
            checks.append(
                CheckResult(
                    name=f"{c['name']} [{host} process {index}]",
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
        phases_s={},
        elapsed_s=elapsed_s,
    )
