"""Checks that run work on the devices (all from the one health child): compute, transfer, bandwidth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devctl.checks.verdict import Verdict, because, failed, join, passed, skipped

if TYPE_CHECKING:
    # collect/ runs the checks and hands each its Context: named here for the checker only (no runtime import upward).
    from devctl.collect.check_context import Context

def _no_device(ctx: Context) -> str:
    """Why the health child had nothing to run on: no backend at all, or none of the expected platforms
    (another platform that did initialize must not stand in for it: a CPU measured for a missing GPU)."""
    expected = ctx.expectations.platforms
    if expected:
        scope = "/".join(expected)
        return f"no {scope} backend initialized, so there is no {scope} device to run on (see the backends check)"
    return "no JAX backend initialized, so there is no device to run on (see the backends check)"


def _probe(ctx: Context, *, required: bool):
    """The health child's result, or the verdict when it had nothing to run on: a failure when `required`."""
    health = ctx.health()
    if health is None:
        why = _no_device(ctx)
        return None, because("backends", failed(why, "run devctl doctor for a diagnosis") if required else skipped(why))
    return health, None


def _device_summary(devices: tuple[str, ...]) -> str:
    platforms: dict[str, int] = {}
    for d in devices:
        platforms[d.split(":")[0]] = platforms.get(d.split(":")[0], 0) + 1
    return ", ".join(f"{n} {p}" for p, n in platforms.items())


def _trials_verdict(health, tests: tuple[str, ...], what: str, remedy: str) -> Verdict | None:
    """A failure verdict when a trial of `tests` failed or the child died during (or before) them; else None."""
    trials = [t for t in health.trials if t.test in tests or t.test == "init"]
    bad = [t for t in trials if not t.ok]
    details = {
        "trials": [
            {"test": t.test, "device": t.device, "ok": t.ok, "rel_error": t.rel_error, "error": t.error}
            for t in trials
        ]
    }
    # A crash blames the step it happened in; a crash before this check's tests ran leaves them unrun.
    died_here = health.failure is not None and (health.unfinished in tests or not any(t.test in tests for t in trials))
    if bad:
        lines = [f"{t.test} on {t.device}: {t.error}" for t in bad]
        if died_here:
            lines.append(f"then the probe {health.failure}")
        return failed(join(lines, 2), remedy, **details)
    if died_here:
        return failed(f"the health probe {health.failure}", remedy, **details)
    if not trials:
        return failed(f"the health probe ran no {what} test", "run devctl doctor", **details)
    return None


def check_compute(ctx: Context) -> Verdict:
    health, early = _probe(ctx, required=bool(ctx.expectations.platforms))
    if early:
        return early
    bad = _trials_verdict(
        health, ("matmul", "sum"), "compute",
        "this device computes wrong results: drain it and run the vendor's diagnostics (dcgmi diag -r 3, or recreate the TPU VM)",
    )  # fmt: skip
    if bad:
        return bad
    errors = [t.rel_error for t in health.trials if t.test in ("matmul", "sum") and t.rel_error is not None]
    worst = max(errors, default=0.0)
    return passed(
        f"jitted matmul and sum agree with numpy on {_device_summary(health.devices)} device(s) (worst relative error {worst:.1e})",
        trials=len(errors),
        worst_rel_error=worst,
    )


def check_transfer(ctx: Context) -> Verdict:
    health, early = _probe(ctx, required=bool(ctx.expectations.platforms))
    if early:
        return early
    bad = _trials_verdict(
        health, ("h2d-d2h", "d2d"), "transfer",
        "bytes change in transit: drain this host and check the PCIe/NVLink/ICI links (dcgmi diag -r 2, nvidia-smi -q -d ECC)",
    )  # fmt: skip
    if bad:
        return bad
    round_trips = sum(1 for t in health.trials if t.test == "h2d-d2h")
    pairs = sum(1 for t in health.trials if t.test == "d2d")
    size = next((t.size_bytes for t in health.trials if t.size_bytes), 0)
    return passed(
        f"{size} random bytes unchanged host->device->host on {round_trips} device(s) and device->device on {pairs} ordered pair(s)",
        round_trips=round_trips,
        pairs=pairs,
        size_bytes=size,
    )


def check_bandwidth(ctx: Context) -> Verdict:
    want = ctx.expectations.min_h2d_gbps
    # As memory: nothing to measure fails only an expectation about the figure.
    health, early = _probe(ctx, required=want is not None)
    if early:
        return early
    cells = [c for c in health.h2d_cells if c.direction == "h2d"]
    details = {
        "cells": [
            {k: getattr(c, k) for k in ("dst", "variant", "size_bytes", "gbps", "median_s", "cv", "verified", "zero_copy", "note")}
            for c in cells
        ],
        "expected_min_gbps": want,
    }
    why_none = health.bandwidth_error or (f"the health probe {health.failure}" if health.failure else "no h2d measurement came back")
    if not cells:
        if want is None:
            return skipped(f"could not measure: {why_none}", **details)
        return failed(f"could not measure h2d bandwidth: {why_none}", "run devctl bench transfer --direction h2d for details", **details)
    garbled = [c.dst for c in cells if c.verified is False]
    if garbled:
        return failed(f"h2d bytes arrived changed on {', '.join(garbled)}", "drain this host and check its PCIe links", **details)
    measured = {c.dst: c.gbps for c in cells if c.gbps}
    unmeasured = [f"{c.dst}: {c.note or 'no figure'}" for c in cells if not c.gbps]
    size_mib = cells[0].size_bytes / (1 << 20)
    if want is None:
        if not measured:
            return skipped(f"no h2d figure: {join(unmeasured, 1)}", **details)
        dst, gbps = min(measured.items(), key=lambda kv: kv[1])
        return passed(f"h2d {gbps:.2f} GB/s to {dst} ({size_mib:.0f} MiB, pageable)", **details)
    slow = sorted((d for d, g in measured.items() if g < want), key=lambda d: measured[d])
    if slow:
        parts = [f"{d} {measured[d]:.2f} GB/s" for d in slow]
        return failed(f"h2d {join(parts, 2)}, expected at least {want:g} GB/s", _slow_h2d_remedy(slow), **details)
    if unmeasured:
        return failed(f"cannot verify {want:g} GB/s: {join(unmeasured, 2)}", "run devctl bench transfer --direction h2d", **details)
    low = min(measured.values())
    return passed(f"h2d >= {want:g} GB/s on all {len(measured)} device(s) (lowest {low:.2f} GB/s, {size_mib:.0f} MiB)", **details)


def _slow_h2d_remedy(devices: list[str]) -> str:
    """Where to look for a slow host-to-device copy: a CPU device's is a copy within host memory, with no link."""
    if all(d.startswith("cpu") for d in devices):
        return ("a CPU device's h2d is a copy within host memory: check what else loads this host (its memory bandwidth), "
                "and run devctl bench transfer, which sets it against the host's own memcpy")  # fmt: skip
    if all(d.startswith(("cuda", "gpu")) for d in devices):
        return "check the PCIe link (nvidia-smi -q -d PCIE: generation and width), NUMA placement, and run devctl bench transfer"
    return "check the host-to-device link and NUMA placement, and run devctl bench transfer"
