"""What the per-device benchmark children (`bench memory`, `bench matmul`) share: starting jax, the devices the
flags name, the room a cell needs, the timing loop and the run's environment.

Timing (reference/monitoring-and-transfer.md B.6): the function is compiled once before any timing; untimed
warm-ups; every timed call ends in block_until_ready; no garbage collection inside a timed call; samples until
both --repeats and --min-time are met (bounded in wall time and count); the devices measured at one size take
turns call by call, so that a busy moment of the machine does not fall on one device alone.
"""

from __future__ import annotations

import gc
import os
import platform
import time
from typing import Any, Callable

from devctl.model.bench_chip import ChipOptions
from devctl.probe.channel import emit
from devctl.probe.transfer_devices import device_free_bytes, device_name, dist_version
from devctl.probe.transfer_measure import host_available_bytes, sample_stats
from devctl.units import format_bytes

# Above this many samples a cell has said all it can.
MAX_SAMPLES = 1000
# Wall-clock bound per device and size, as a multiple of --min-time, past the --repeats asked for.
WALL_FACTOR = 4
# While one cell runs longer than this, tell the parent's watchdog that work goes on.
HEARTBEAT_S = 2.0
# Of the host memory available, the share a CPU device's cell may take (the rest is the machine's).
HOST_SHARE = 0.8


class UsageProblem(Exception):
    """Bad input the parent could not check (device ids): reported as an `error` event of kind usage."""


def import_jax() -> tuple[Any, Any] | None:
    """jax and numpy, or None after an error event (a broken install is worth a line, not a traceback)."""
    try:
        import jax
        import numpy as np
    except Exception as e:
        emit("error", kind="import", message=f"cannot import jax: {type(e).__name__}: {e}")
        return None
    return jax, np


def local_devices(jax) -> list | None:
    try:
        return list(jax.local_devices())
    except Exception as e:  # no backend could start: the parent reports it in one line
        emit("error", kind="backend", message=f"JAX found no usable device: {type(e).__name__}: {e}")
        return None


def resolve_devices(opts: ChipOptions, local: list) -> list:
    """The local devices --device names (every one when not given: the point is to compare them)."""
    if not opts.devices:
        return list(local)
    chosen = []
    for ref in opts.devices:
        found = [d for d in local if ref.names(d.id, d.platform, device_name(d).split(":")[0])]
        if not found:
            ids = ", ".join(str(d.id) for d in local)
            kind = device_name(local[0]).split(":")[0]
            what = f"id {ref}" if ref.platform is None else str(ref)
            raise UsageProblem(f"unknown device {what} for --device; this host's {kind} devices are {ids}")
        chosen.append(found[0])
    return list({d.id: d for d in chosen}.values())


def start(opts: ChipOptions) -> tuple[Any, Any, list, list] | int:
    """jax, numpy, the local devices and those --device names; or, when the child cannot go on, its exit code
    (the reason already emitted: a failed import or backend, or a device this host lacks)."""
    imported = import_jax()
    if imported is None:
        return 1
    jax, np = imported
    local = local_devices(jax)
    if local is None:
        return 1
    try:
        devices = resolve_devices(opts, local)
    except UsageProblem as e:
        emit("error", kind="usage", message=str(e))
        return 0
    return jax, np, local, devices


def prepare_and_time(devices: list, need_bytes: int, what: str, make: Callable[[Any], Any], opts: ChipOptions) -> tuple[dict, dict, dict]:
    """Every device's callable made with `make(dev)` (or skipped, with why: no room for `need_bytes`, or making it
    failed), then all timed taking turns; (made, samples, skipped), each by device name."""
    ready: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for dev in devices:
        # Checked device by device as the buffers are made: on CPU the devices share host memory, and what the
        # devices before this one hold is already gone from what is available.
        why = room_problem(dev, need_bytes, what)
        if why:
            skipped[device_name(dev)] = why
            continue
        try:
            ready[device_name(dev)] = make(dev)
            emit("tick", samples=0)  # making the buffers and compiling is work too: the watchdog hears of it
        except Exception as e:  # an out-of-memory or a backend refusal costs this device's cell, not the run
            skipped[device_name(dev)] = failure_note(e)
    try:
        samples = time_interleaved(dict(ready), opts) if ready else {}
    except Exception as e:
        skipped.update(dict.fromkeys(ready, failure_note(e)))
        samples = {}
    return ready, samples, skipped


def room_problem(dev, need_bytes: int, what: str) -> str | None:
    """Why a cell needing `need_bytes` on `dev` must be skipped (device memory, or host memory for a CPU device)."""
    if dev.platform == "cpu":
        avail = host_available_bytes()
        if avail is not None and need_bytes > avail * HOST_SHARE:
            return f"skipped: {what} needs about {format_bytes(need_bytes)} of host memory, {format_bytes(avail)} available"
        return None
    free = device_free_bytes(dev)
    if free is not None and need_bytes > free:
        return f"skipped: {what} needs about {format_bytes(need_bytes)} on {device_name(dev)}, {format_bytes(free)} free"
    return None


def failure_note(e: BaseException) -> str:
    text = " ".join(str(e).split())
    first = text.split(". ")[0][:200]
    if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return f"skipped: out of memory ({first})"
    return f"failed: {type(e).__name__}: {first}"


def time_interleaved(calls: dict[str, Callable[[], Any]], opts: ChipOptions) -> dict[str, list[float]]:
    """Seconds per call of each device's `call` (which must return an array), each ended by block_until_ready.

    The devices take turns, one call each per round (the first of the round rotating): whatever else the machine
    is doing at a moment slows every device alike, so a device is named a straggler for being slow, not for being
    measured while another job ran. Each device gets --warmups untimed calls first; rounds go on until every
    device has --repeats samples and --min-time of timed calls (or MAX_SAMPLES, or the wall-clock cap).
    """
    for call in calls.values():
        for _ in range(opts.warmups):
            t0 = time.perf_counter()
            call().block_until_ready()
            # One warm-up longer than the whole time budget has warmed all there is.
            if time.perf_counter() - t0 >= max(opts.min_time_s, 1.0):
                break
    emit("tick", samples=0)
    names = list(calls)
    samples: dict[str, list[float]] = {k: [] for k in names}
    timed = dict.fromkeys(names, 0.0)
    wall_start = last_beat = time.perf_counter()
    wall_cap = opts.min_time_s * WALL_FACTOR * len(names)
    gc.collect()
    gc.disable()  # a collection inside a timed call would be charged to the device
    try:
        for r in range(MAX_SAMPLES):
            first = r % len(names)
            for k in names[first:] + names[:first]:
                t0 = time.perf_counter_ns()
                out = calls[k]()
                out.block_until_ready()
                t1 = time.perf_counter_ns()
                del out
                samples[k].append((t1 - t0) / 1e9)
                timed[k] += (t1 - t0) / 1e9
            now = time.perf_counter()
            if now - last_beat >= HEARTBEAT_S:
                emit("tick", samples=r + 1)
                last_beat = now
            if r + 1 >= opts.repeats and (min(timed.values()) >= opts.min_time_s or now - wall_start >= wall_cap):
                break
    finally:
        gc.enable()
    return samples


def stats(samples: list[float]) -> dict:
    return sample_stats(samples)


def environment(jax, np, local: list, opts: ChipOptions, sweep_note: str | None) -> dict:
    backend = local[0].client
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": dist_version("jaxlib"),
        "numpy": np.__version__,
        "backend": getattr(backend, "platform", None),
        "platform_version": getattr(backend, "platform_version", None),
        "hostname": platform.node(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "xla_flags": os.environ.get("XLA_FLAGS"),
        "jax_platforms": os.environ.get("JAX_PLATFORMS"),
        "repeats": opts.repeats,
        "min_time_s": opts.min_time_s,
        "warmups": opts.warmups,
        "quick": opts.quick,
        "sweep_note": sweep_note,
    }
