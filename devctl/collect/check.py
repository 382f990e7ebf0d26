"""Run the selected checks over one shared context and turn their verdicts into a report."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from typing import Callable, Literal

from devctl.checks import CHECK_NAMES, backends, busy, compute, machine, nvml, performance, software
from devctl.checks.verdict import Verdict
from devctl.collect.check_context import Context
from devctl.model.check import (
    CHECK_SCHEMA,
    CheckReport,
    CheckResult,
    CheckStatus,
    Expectations,
)
from devctl.version import __version__

CHECKS: dict[str, Callable[[Context], Verdict]] = {
    "versions": software.check_versions,
    "plugins": software.check_plugins,
    "backends": backends.check_backends,
    "devices": backends.check_devices,
    "compute": compute.check_compute,
    "transfer": compute.check_transfer,
    "memory": backends.check_memory,
    "bandwidth": compute.check_bandwidth,
    "memory-bw": performance.check_memory_bw,
    "matmul": performance.check_matmul,
    "busbw": performance.check_busbw,
    "stragglers": performance.check_stragglers,
    "busy": busy.check_busy,
    "nvml-health": nvml.check_nvml_health,
    "host": machine.check_host,
    "tpu": machine.check_tpu,
    "env": software.check_env,
}
assert tuple(CHECKS) == CHECK_NAMES, "CHECK_NAMES and the registry must list the same checks in the same order"


def select(only: list[str] | None, skip: list[str]) -> list[str]:
    """Check names to run, in registry order (names already validated)."""
    wanted = set(only) if only else set(CHECK_NAMES)
    return [n for n in CHECK_NAMES if n in wanted and n not in set(skip)]


def run_checks(ctx: Context, on_result: Callable[[CheckResult], None] | None = None) -> list[CheckResult]:
    """Each selected check in order; a check that raises becomes a failure naming the error, not a traceback.

    A check's duration is its own work: the shared probes it waited for (the first check to ask waits for
    the whole backend probe, the next ones for nothing) are timed apart, in the report's phases_s.
    """
    results = []
    for name in ctx.checks:
        ctx.take_wait_s()
        started = time.monotonic()
        try:
            verdict = CHECKS[name](ctx)
        except Exception as e:  # a bug or an unforeseen machine must not hide the other checks' verdicts
            if os.environ.get("DEVCTL_DEBUG") == "1":
                raise
            verdict = Verdict(
                CheckStatus.FAIL,
                f"devctl could not run this check: {type(e).__name__}: {' '.join(str(e).split())}",
                "rerun with DEVCTL_DEBUG=1 and report it",
            )
        own_s = max(0.0, time.monotonic() - started - ctx.take_wait_s())
        result = CheckResult(name, verdict.status, verdict.message, verdict.remediation, round(own_s, 3), verdict.details, verdict.caused_by)
        results.append(result)
        if on_result:
            on_result(result)
    return with_causes(results)


def build_report(ctx: Context, results: list[CheckResult], *, strict: bool, elapsed_s: float) -> CheckReport:
    if strict:
        # --strict: a warning fails the run, and says so in its own record (JUnit, annotations, JSON).
        results = [
            dataclasses.replace(r, status=CheckStatus.FAIL, details={**r.details, "strict": "warning counted as a failure"})
            if r.status is CheckStatus.WARN
            else r
            for r in results
        ]
    statuses = {r.status for r in results}
    status: Literal["pass", "warn", "fail"] = "fail" if CheckStatus.FAIL in statuses else "warn" if CheckStatus.WARN in statuses else "pass"
    return CheckReport(
        schema=CHECK_SCHEMA,
        devctl_version=__version__,
        timestamp=time.time(),
        hostname=socket.gethostname(),
        status=status,
        strict=strict,
        expectations=ctx.expectations,
        checks=results,
        phases_s=dict(ctx.phases_s),
        elapsed_s=round(elapsed_s, 3),
    )


def with_causes(results: list[CheckResult]) -> list[CheckResult]:
    """Each result's caused_by kept only where the check it names ran and failed: with --skip backends, or when
    backends passed, a check that found no device stands on its own."""
    failed = {r.name for r in results if r.status is CheckStatus.FAIL}
    kept = []
    for r in results:
        if r.caused_by is not None and (r.caused_by not in failed or r.caused_by == r.name):
            r = dataclasses.replace(r, caused_by=None)
        kept.append(r)
    return kept


def check(
    expectations: Expectations,
    names: list[str],
    *,
    host_root: str = "/",
    strict: bool = False,
    on_result: Callable[[CheckResult], None] | None = None,
) -> CheckReport:
    """Everything `devctl check` does short of printing."""
    started = time.monotonic()
    with Context(expectations, host_root, names) as ctx:
        results = run_checks(ctx, on_result)
    return build_report(ctx, results, strict=strict, elapsed_s=time.monotonic() - started)
