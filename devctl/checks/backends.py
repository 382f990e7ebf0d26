"""Checks of what JAX sees: backends, devices and their memory, against the expectations."""

from __future__ import annotations

from typing import TYPE_CHECKING

from devctl.checks.verdict import Verdict, because, failed, join, passed, skipped, warned
from devctl.model import to_jsonable
from devctl.model.list_ import BackendStatus
from devctl.model.memstats import usable_memory
from devctl.units import format_bytes

if TYPE_CHECKING:
    # collect/ runs the checks and hands each its Context: named here for the checker only (no runtime import upward).
    from devctl.collect.check_context import Context

_DEVICE_PLATFORM = {"gpu": ("cuda", "rocm", "gpu"), "cuda": ("cuda", "gpu"), "rocm": ("rocm", "gpu")}


def platform_matches(expected: str, actual: str) -> bool:
    """CUDA and ROCm devices call their platform "gpu"; an expected "gpu" is either."""
    return actual == expected or actual in _DEVICE_PLATFORM.get(expected, ()) or (
        expected in ("cuda", "rocm") and actual == "gpu"
    )


def scoped_devices(ctx: Context) -> tuple[list, str]:
    """The devices the expectations talk about: those of the expected platforms, else of JAX's default."""
    inv = ctx.inventory()
    exp = ctx.expectations
    if exp.platforms:
        devices = [d for d in inv.devices if any(platform_matches(p, d.platform) for p in exp.platforms)]
        return devices, "/".join(exp.platforms)
    default = inv.default_platform
    devices = [d for d in inv.devices if default and platform_matches(default, d.platform)]
    return devices, default or "default"


def check_backends(ctx: Context) -> Verdict:
    """What jax.devices() does, judged by one rule (devctl.checks.diagnosis.severity_of): fail when it raises,
    exits, crashes or hangs, or an expected platform (--platform) is missing; warn when JAX works but leaves this
    machine's accelerator unused; pass when it works on what is here, naming what it skips."""
    inv = ctx.inventory()
    exp = ctx.expectations
    rows = [b for b in inv.backends if not b.plugin]  # plugin failures belong to the plugins check
    ok = [b for b in rows if b.status is BackendStatus.OK]
    down = [b for b in rows if b.status in (BackendStatus.FAILED, BackendStatus.TIMEOUT, BackendStatus.CRASHED, BackendStatus.EXITED)]
    details = {
        "backends": {b.platform: {"status": b.status.value, "init_s": b.init_s, "error": b.error, "code": b.code} for b in rows},
        "default_platform": inv.default_platform,
    }
    problems, remedies = [], []
    no_chip = False  # an expected TPU on a machine without one: the tpu check's failure, this one follows from it
    for expected in exp.platforms or ():
        if any(platform_matches(expected, b.platform) for b in ok):
            continue
        related = [b for b in rows if platform_matches(expected, b.platform)]
        if related and related[0].status is BackendStatus.SKIPPED and related[0].platform == "tpu":
            # JAX passes over the TPU backend where there is no chip (quiet_tpu_without_chips): no install or
            # setting brings one, so "JAX ignores this backend" is no advice to a job that expects a TPU.
            problems.append(f"expected {expected}: no TPU chip on this machine")
            remedies.append("run this job on a TPU VM")
            no_chip = True
        elif related:
            problems.append(f"expected {expected}: {_failure(related[0], exp.timeout_s)}")
            remedies.append(related[0].hint or "run devctl doctor for a diagnosis")
        else:
            problems.append(f"expected {expected}: no {expected} backend is installed")
            remedies.append(_install_hint(expected))
    outcome = inv.jax_outcome
    if outcome is not None and outcome.fails:
        # JAX as a whole fails: that is the verdict, with the advice list and doctor give for it.
        details["code"] = outcome.code
        details["remedies"] = to_jsonable(outcome.remedies)  # the fix as data (model.remedy), as list and doctor give it
        others = [_failure(b, exp.timeout_s) for b in down if b.platform != outcome.culprit]
        lines = [f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit}", *problems, *others]
        verdict = failed(join(lines, 2), outcome.fix or "run devctl doctor for a diagnosis", **details)
        # Fixed by an environment change: a variable's value is the cause, and the env check judges the variables
        # (kept as the cause only where env failed too: JAX_ENABLE_X64=maybe, a refused XLA_FLAGS).
        return because("env", verdict) if outcome.fix_env else verdict
    if problems:
        verdict = failed(join(problems, 2), remedies[0], **details)
        return because("tpu", verdict) if no_chip and len(problems) == 1 else verdict
    if not ok:
        why = join([_failure(b, exp.timeout_s) for b in rows], 2) or "no backend is registered"
        return failed(f"no JAX backend initialized: {why}", "run devctl doctor for a diagnosis", **details)
    # A CPU backend starts in a few milliseconds: "(0.00 s)" would say nothing, so nothing is said (issue 24).
    summary = ", ".join(f"{b.platform} ({b.init_s:.2f} s)" if b.init_s is not None and b.init_s >= 0.005 else b.platform for b in ok)
    summary = f"initialized: {summary}; default {inv.default_platform}"
    skipped = [f"{b.platform} {b.status.value}" + (f" ({b.summary})" if b.summary else "") for b in down]
    if down and inv.unused_accelerators:
        # JAX works, but not on this machine's accelerator: the advice of the row that should have used it.
        advised = next((b for b in down if b.hint), None)
        if advised is not None:
            details.update(code=advised.code, remedies=to_jsonable(advised.remedies))
        return warned(f"{summary}; {join(skipped, 2)}", advised.hint if advised else "run devctl doctor", **details)
    return passed(f"{summary}; JAX goes on without {join(skipped, 2)}" if skipped else summary, **details)


def _failure(b, timeout_s: float) -> str:
    if b.status is BackendStatus.TIMEOUT:
        return f"{b.platform} backend did not initialize within {timeout_s:g} s"
    return f"{b.platform} backend {b.status.value}: {b.error}"


def _install_hint(platform: str) -> str:
    return {
        "cuda": "pip install -U 'jax[cuda13]' (driver >= 580) or 'jax[cuda12]' (driver >= 525)",
        "gpu": "pip install -U 'jax[cuda13]' (NVIDIA, driver >= 580) or see JAX's ROCm install guide (AMD)",
        "rocm": "install the ROCm plugin (see JAX's ROCm install guide)",
        "tpu": "pip install -U 'jax[tpu]'",
    }.get(platform, f"install the JAX plugin that provides {platform}")


def check_devices(ctx: Context) -> Verdict:
    inv = ctx.inventory()
    exp = ctx.expectations
    devices, scope = scoped_devices(ctx)
    kinds = sorted({d.device_kind for d in devices})
    details = {"scope": scope, "count": len(devices), "kinds": kinds, "expected_min": exp.min_devices, "expected_kind": exp.device_kind}
    problems, remedies = [], []
    if exp.min_devices is not None and len(devices) < exp.min_devices:
        problems.append(f"{len(devices)} {scope} device(s), expected at least {exp.min_devices}")
        remedies.append("check CUDA_VISIBLE_DEVICES / TPU_VISIBLE_CHIPS and that every accelerator is attached (devctl list)")
    if exp.device_kind is not None:
        wrong = sorted({d.device_kind for d in devices if exp.device_kind.lower() not in d.device_kind.lower()})
        if wrong or not devices:
            found = ", ".join(wrong or kinds) or "none"
            problems.append(f"device kind {found}, expected {exp.device_kind}")
            remedies.append(f"run this job on a runner with {exp.device_kind} devices")
    outcome = inv.jax_outcome
    if not devices and outcome is not None and outcome.fails:
        # One cause, one fix: the backends row names it, and it is what gives this row no device.
        problems.insert(0, f"no {scope} device: jax.devices() {outcome.result}")
        remedies.insert(0, outcome.fix or "run devctl doctor for a diagnosis")
        details["remedies"] = to_jsonable(outcome.remedies)
    if not devices:  # whatever else is wrong, no device follows from the backends' failure
        verdict = failed(join(problems), remedies[0], **details) if problems else failed(f"JAX sees no {scope} device", "run devctl doctor for a diagnosis", **details)
        return because("backends", verdict)
    if problems:
        return failed(join(problems), remedies[0], **details)
    unused = [f"{u.name} at {u.location}: {u.reason}" for u in inv.unused_accelerators]
    summary = f"{len(devices)} {scope} device(s): {', '.join(kinds)}"
    if unused:
        details["unused"] = unused
        return warned(f"{summary}; {len(unused)} accelerator(s) unused: {join(unused, 1)}", "run devctl doctor", **details)
    return passed(summary, **details)


def check_memory(ctx: Context) -> Verdict:
    """What a new JAX process can allocate on each device (`devctl memstats`' usable figure): the allocator's
    bytes_limit, bounded by the driver's free memory where another process holds some."""
    exp = ctx.expectations
    devices, scope = scoped_devices(ctx)
    free = {g.index: g.memory_free_bytes for g in ctx.inventory().hardware.nvidia.gpus}
    usable: dict[str, tuple[int | None, str | None]] = {}
    for d in devices:
        limit = (d.memory_stats or {}).get("bytes_limit")
        usable[f"{d.platform}:{d.id}"] = usable_memory(limit, free.get(d.nvml_gpu["index"]) if d.nvml_gpu else None)
    known = {k: v for k, (v, _) in usable.items() if v is not None}
    details = {
        "usable_bytes": {k: v for k, (v, _) in usable.items()},
        "bytes_limit": {f"{d.platform}:{d.id}": (d.memory_stats or {}).get("bytes_limit") for d in devices},
        "expected_min_bytes": exp.min_memory_bytes,
    }
    if not devices:
        if exp.min_memory_bytes is not None:
            return because("backends", failed(f"no {scope} device to measure", "run devctl doctor for a diagnosis", **details))
        return because("backends", skipped(f"no {scope} device", **details))
    if exp.min_memory_bytes is None:
        if not known:
            return skipped(f"{scope} devices report no memory_stats(), so no bytes_limit", **details)
        low = min(known, key=lambda k: known[k])
        return passed(f"{format_bytes(known[low])} usable per device (lowest of {len(known)}: {_why(low, usable[low][1])})", **details)
    want = exp.min_memory_bytes
    unknown = sorted(k for k, (v, _) in usable.items() if v is None)
    short = sorted((k for k, v in known.items() if v < want), key=lambda k: known[k])
    if short:
        parts = [f"{k} {format_bytes(known[k])} usable ({_why(k, usable[k][1])})" for k in short]
        held = any(usable[k][1] == "driver" for k in short)
        return failed(
            f"{join(parts, 2)}, expected at least {format_bytes(want)}",
            "free the device: another process holds memory (devctl memstats names it)" if held
            else "raise XLA_PYTHON_CLIENT_MEM_FRACTION, or run on devices with more memory",
            **details,
        )  # fmt: skip
    if unknown:
        return failed(
            f"cannot verify {format_bytes(want)}: {join(unknown, 3, ', ')} report no memory_stats()",
            "run on a backend that reports memory_stats() (CUDA, ROCm, TPU), or drop --min-memory",
            **details,
        )
    return passed(f"{format_bytes(want)} or more usable on all {len(known)} device(s) (lowest {format_bytes(min(known.values()))})", **details)


def _why(key: str, bound: str | None) -> str:
    return "the driver's free memory: other processes hold the rest" if bound == "driver" else "the allocator's limit"
