"""`devctl check --distributed`: every host's checks in one report, each case named with its host."""

from __future__ import annotations

import statistics
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
                    caused_by=cluster_check_name(c["caused_by"], host, index) if c.get("caused_by") else None,
                )
            )
    across = host_stragglers(reports)
    if across is not None:
        checks.append(across)
    statuses = {doc.get("status") for doc in reports} | ({across.status.value} if across is not None else set())
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


def host_stragglers(reports: list[dict[str, Any]]) -> CheckResult | None:
    """The stragglers check across processes: each process's median device figure (memory copy GB/s, matmul
    TFLOP/s) against the other processes' by the rule of devctl.model.stragglers, so a slow host is named even
    when its own devices agree with each other. None when fewer than 2 processes measured."""
    from devctl.model.stragglers import DEFAULT_FLOOR_PCT, DEFAULT_MAD_K, find_stragglers
    from devctl.units import digits, figure

    per_metric: dict[str, dict[str, float]] = {}
    units: dict[str, tuple[str, str]] = {}
    for index, doc in enumerate(reports):
        check = next((c for c in doc.get("checks", []) if c.get("name") == "stragglers"), None)
        for kind, measured in ((check or {}).get("details") or {}).items():
            if not isinstance(measured, dict) or not isinstance(measured.get("figures"), dict):
                continue
            figures = [float(v) for v in measured["figures"].values() if isinstance(v, (int, float)) and v > 0]
            if figures:
                where = f"{doc.get('hostname') or '?'} process {index}"
                per_metric.setdefault(kind, {})[where] = statistics.median(figures)
                units[kind] = (str(measured.get("metric") or kind), str(measured.get("unit") or ""))
    compared = {kind: values for kind, values in per_metric.items() if len(values) >= 2}
    if not compared:
        return None
    named: list[str] = []
    medians: list[str] = []
    details: dict[str, Any] = {}
    for kind, values in compared.items():
        metric, unit = units[kind]
        found = find_stragglers(values)
        places = digits(statistics.median(values.values()))
        named += [f"{metric} {s.describe(unit, digits=places)} of the other processes" for s in found]
        medians.append(f"{metric} median {figure(statistics.median(values.values()))} {unit}")
        details[kind] = {"metric": metric, "unit": unit, "by_process": values, "stragglers": [s.name for s in found]}
    processes = max(len(v) for v in compared.values())
    name = cluster_check_name("stragglers", "", None)
    details["rule"] = (
        f"a process is a straggler when its devices' median is below the median of the other processes' by more "
        f"than max({DEFAULT_FLOOR_PCT:g}%, {DEFAULT_MAD_K:g} x 1.4826 x their MAD)"
    )
    if named:
        return CheckResult(
            name, CheckStatus.FAIL, f"slow process(es), each its devices' median: {'; '.join(named)}",
            "drain the named host, or check what else runs there (CPU, memory and PCIe contention, throttling); "
            "then run devctl bench memory and devctl bench matmul on it",
            details=details,
        )  # fmt: skip
    return CheckResult(name, CheckStatus.PASS, f"no slow process among {processes} ({', '.join(medians)} per process)", details=details)
