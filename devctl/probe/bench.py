"""The bench engine, in the probe children of all four benches: the child's start and its events, the devices the
flags name, the room a cell needs, the timing loop (time_interleaved), the run's environment; and the per-device
recipes' runner (`bench memory`, `bench matmul`).

Every bench child reads its request, emits `plan` {devices, environment, cells, ...} once, a `cell` per cell
(also the watchdog's heartbeat), `tick` {samples} inside a long one, `dropped` {cells} for planned cells that will
not run (a sweep stopped early), and `done` {elapsed_s, ...}; or one
`error` {kind, message} (kind usage: bad input only the child can see, the parent exits 2).

Timing: docs/bench.md (bench memory, Method); time_interleaved below. A sample is a burst of K calls and one
block_until_ready, because one call + block_until_ready also times JAX's launch and the host's synchronisation
(about 0.2 ms on an H200, where it read a 1 GiB copy 29% and a bf16 4096 matmul 44% low:
reference/h200-observations.md section 2).
"""

from __future__ import annotations

import gc
import math
import os
import platform
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable

from devctl.model import to_jsonable
from devctl.model.bench import BURST_MIN_S, BenchDevice, ChipOptions
from devctl.model.timing import sample_stats, single_timing
from devctl.probe.channel import emit, read_request
from devctl.text import first_line
from devctl.units import format_bytes

# Above this many samples a cell has said all it can.
MAX_SAMPLES = 1000
# Wall-clock bound per device and size, as a multiple of --min-time, past the --repeats asked for.
WALL_FACTOR = 4
# While one cell runs longer than this, tell the parent's watchdog that work goes on.
HEARTBEAT_S = 2.0
# Of the host memory available, the share a CPU device's cell may take (the rest is the machine's).
HOST_SHARE = 0.8
# Every sample is a burst, so no figure holds a call's own synchronisation; above MAX_CALLS a call is so short
# that the burst times the host's dispatch, whatever its length.
MIN_CALLS, MAX_CALLS = 2, 1000
# Single calls (call + block_until_ready) timed beside the bursts, one a round, for the per-call overhead: up to
# SINGLE_SAMPLES, and past the first few only while they add at most SINGLE_SHARE to the bursts' time (where a call
# is long, the launch is lost in its noise anyway, and a cell's time should go to its figure).
SINGLE_SAMPLES, SINGLE_FIRST, SINGLE_SHARE = 50, 3, 0.25
# How a child with one CPU device says where more come from.
CPU_DEVICES_HINT = "; on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N gives N devices"


class ChildProblem(Exception):
    """Why a bench child cannot go on, as its `error` event says it (`kind`) and its exit code."""

    kind, code = "backend", 1


class UsageProblem(ChildProblem):
    """Bad input only the child can see (a device id, the device count): exit 0, the parent exits 2."""

    kind, code = "usage", 0


def run_child(options: Any, body: Callable[[Any, Any, Any], dict]) -> int:
    """A bench child: its request read as `options` (the options dataclass), jax and numpy imported, then
    `body(opts, jax, np)`, whose fields join the `done` event; a ChildProblem is one `error` event and its exit code
    (a broken install or a backend that cannot start is worth a line, not a traceback)."""
    opts = options.from_request(read_request())
    started = time.monotonic()
    try:
        import jax
        import numpy as np
    except Exception as e:
        emit("error", kind="import", message=f"cannot import jax: {type(e).__name__}: {e}")
        return 1
    try:
        done = body(opts, jax, np)
    except ChildProblem as e:
        emit("error", kind=e.kind, message=str(e))
        return e.code
    except Exception as e:  # what no cell caught (a backend lost mid-run): one line, and this child's own exit
        emit("error", kind="backend", message=f"{type(e).__name__}: {first_line(e)}")
        return 1
    emit("done", **done, elapsed_s=round(time.monotonic() - started, 3))
    return 0


def local_devices(jax) -> list:
    try:
        return list(jax.local_devices())
    except Exception as e:  # no backend could start: the parent reports it in one line
        raise ChildProblem(f"JAX found no usable device: {type(e).__name__}: {first_line(e)}") from e


# ---- the facts every bench child reports about each jax device, the memory free on it and on the host -----------


def device_name(dev) -> str:
    platform_name = getattr(getattr(dev, "client", None), "platform", None) or dev.platform
    return f"{platform_name}:{dev.id}"


def memory_kinds(dev) -> tuple[str, ...]:
    try:
        return tuple(mem.kind for mem in dev.addressable_memories())
    except Exception:
        return ()


def device_stats(dev) -> dict:
    try:
        return dev.memory_stats() or {}
    except Exception:
        return {}


def device_free_bytes(dev) -> int | None:
    if dev.platform == "cpu":
        return None  # CPU devices report no memory of their own; the host check covers them
    st = device_stats(dev)
    limit = st.get("bytes_limit")
    if not limit:
        return None
    return max(int(limit) - int(st.get("bytes_in_use", 0)), 0)


def device_info(dev) -> BenchDevice:
    limit = device_stats(dev).get("bytes_limit")
    return BenchDevice(
        id=dev.id,
        name=device_name(dev),
        platform=dev.platform,
        device_kind=dev.device_kind,
        memory_kinds=memory_kinds(dev),
        bytes_limit=int(limit) if limit else None,
    )


def dist_version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


def host_available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def find_device(local: list, ref: Any, flag: str) -> Any:
    """The local device a DeviceRef names; a platform other than the device's is as unknown as a missing id."""
    for d in local:
        if ref.names(d.id, d.platform, device_name(d).split(":")[0]):
            return d
    ids = ", ".join(str(d.id) for d in local)
    what = f"id {ref}" if ref.platform is None else str(ref)
    raise UsageProblem(f"unknown device {what} for {flag}; this host's {device_name(local[0]).split(':')[0]} devices are {ids}")


def resolve_devices(opts: Any, local: list) -> list:
    """The local devices --device names (every one when not given: the point is to compare them)."""
    if not opts.devices:
        return list(local)
    return list(dict.fromkeys(find_device(local, ref, "--device") for ref in opts.devices))


def room_problem(devs: list, per_device: int, what: str = "", host_share: float | None = HOST_SHARE) -> str | None:
    """Why a cell needing `per_device` bytes on each of `devs` is skipped: CPU devices share host memory (their
    needs add up; host_share None: the caller checks the host), the others have their own."""
    lead = f"skipped: {what} needs about" if what else "skipped: needs about"
    cpu = [d for d in devs if d.platform == "cpu"]
    avail = host_available_bytes() if cpu and host_share is not None else None
    if avail is not None and host_share is not None and per_device * len(cpu) > avail * host_share:
        return f"{lead} {format_bytes(per_device * len(cpu))} of host memory, {format_bytes(avail)} available"
    for d in devs:
        free = device_free_bytes(d)  # None on CPU
        if free is not None and per_device > free:
            return f"{lead} {format_bytes(per_device)} on {device_name(d)}, {format_bytes(free)} free"
    return None


def failure_note(e: BaseException) -> str:
    text = " ".join(str(e).split())
    first = text.split(". ")[0][:200]
    if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return f"skipped: out of memory ({first})"
    return f"failed: {type(e).__name__}: {first}"


@dataclass
class Timing:
    """One device's timing of one cell: seconds per call of every burst, and of single calls timed alone."""

    calls_per_sample: int  # K: calls dispatched back to back per sample, then one block_until_ready; 1: call by call
    per_call: list[float] = field(default_factory=list)  # per sample: the burst's wall time / K
    single: list[float] = field(default_factory=list)  # one call + block_until_ready each
    extra: list[float] = field(default_factory=list)  # per single call: it, less the time per call of the burst after it

    def wants_single(self, burst_s: float) -> bool:
        """Whether this round times a single call too, the bursts so far having taken `burst_s`."""
        if len(self.single) >= SINGLE_SAMPLES:
            return False
        return len(self.single) < SINGLE_FIRST or sum(self.single) <= SINGLE_SHARE * burst_s

    def stats(self) -> dict:
        """The cell's statistics (seconds per call, over the samples), K, the single call's median, and the per-call
        overhead: the median of how much longer a call timed alone took than a call of the burst right after it
        (paired, so that the machine's load, which changes from round to round, falls on both), 0 where the single
        calls were no slower. A cell timed call by call (K = 1) has its samples' statistics alone."""
        if self.calls_per_sample == 1:
            return single_timing(self.per_call)
        st = sample_stats(self.per_call)
        single = sample_stats(self.single)["median_s"]
        extra = sample_stats(self.extra)["median_s"]
        overhead = max(0.0, extra) if extra is not None else None
        return {"method": "burst", "samples": len(self.per_call), **st, "calls_per_sample": self.calls_per_sample, "single_call_s": single, "call_overhead_s": overhead}


def burst(call: Callable[[], Any], calls: int) -> float:
    """Wall seconds of `calls` calls dispatched back to back and one block_until_ready on the last; on every one
    where the callable says its calls do not wait on one another (`independent`: transfers from one source, which a
    backend may run on several streams, so the last dispatched need not finish last; an H200's pinned 64 MiB h2d
    burst waited on the last alone read 72 GB/s on a 63 GB/s link)."""
    independent = bool(getattr(call, "independent", False))
    outs: list[Any] = []
    t0 = time.perf_counter_ns()
    out: Any = None
    for _ in range(calls):
        out = call()
        if independent:
            outs.append(out)
    for each in outs or [out]:
        each.block_until_ready()
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e9


def single_call(call: Callable[[], Any]) -> float:
    """Wall seconds of one call and block_until_ready: what a step that waits for its result pays."""
    t0 = time.perf_counter_ns()
    call().block_until_ready()
    t1 = time.perf_counter_ns()
    return (t1 - t0) / 1e9


def burst_limit(call: Any) -> int:
    """The most calls one burst of `call` may hold: its max_burst where set (a backend that ignored a donation
    allocates each call's result, and a long burst would hold many at once), within MIN_CALLS..MAX_CALLS."""
    limit = getattr(call, "max_burst", None)
    return max(MIN_CALLS, min(MAX_CALLS, limit)) if isinstance(limit, int) else MAX_CALLS


def choose_calls(run_burst: Callable[[int], float], limit: int = MAX_CALLS, target_s: float = BURST_MIN_S) -> int:
    """K: the first burst length tried whose burst (`run_burst(k)`, in seconds, untimed for the figures) lasts
    `target_s` twice running, or `limit`. From MIN_CALLS, each try aims at the target from the last burst's time per
    call (a little past it), growing at least 2x and at most 16x (a short burst may have run inline and says
    little). Twice: the first burst of a length can pay once for what the later ones reuse (an H200's first burst
    of two chained 1 GiB copies lasted the 20 ms that later ones took 1.3 ms for, and K stayed 2: 84% of the chip)."""
    calls = min(MIN_CALLS, limit)
    while True:
        wall = run_burst(calls)
        if wall >= target_s and calls < limit:
            wall = run_burst(calls)
        if wall >= target_s or calls >= limit:
            return calls
        aim = math.ceil(calls * target_s * 1.2 / wall) if wall > 0 else limit
        calls = min(limit, max(2 * calls, min(16 * calls, aim)))


def time_interleaved(
    calls: dict[str, Callable[[], Any] | None], opts: Any, *,
    timed_alone: dict[str, Callable[[], float]] | None = None, limits: dict[str, int] | None = None, warmed: int = 0,
    agree: Callable[[Any], Any] = lambda choice: choice,
) -> dict[str, Timing]:
    """Each cell's Timing of its `call` (which must return an array without waiting for it; where its results are to
    follow one another, each call feeds its result to the next). `opts`: a bench's repeats, min_time_s and warmups.
    A call timed alone is single_call, or `timed_alone[name]`, its seconds, where the caller times that call its
    own way (a transfer's fresh source, made untimed); `warmed`: warm-up calls already made; `limits[name]`: the
    most calls a burst may hold (else burst_limit). A cell whose call is None, or whose limit is under MIN_CALLS, is
    timed call by call. The cells take turns so that a device is named a straggler for being slow, not for being
    measured while another job ran. Every choice made from a timing goes through `agree`: with several processes
    calling one collective, each must make the same calls, so process 0's choice is every process's
    (devctl.probe.bench_collective.Agreement.agree).
    """
    alone = {k: partial(single_call, call) for k, call in calls.items() if call is not None} | (timed_alone or {})
    last_beat = time.perf_counter()
    for k in calls:
        for _ in range(max(opts.warmups - warmed, 0)):
            # One warm-up longer than the whole time budget has warmed all there is.
            if agree(alone[k]() >= max(opts.min_time_s, 1.0)):
                break
            if time.perf_counter() - last_beat >= HEARTBEAT_S:  # many warm-ups are work the watchdog must hear of
                emit("tick", samples=0)
                last_beat = time.perf_counter()
    emit("tick", samples=0)
    names = list(calls)
    gc.collect()
    gc.disable()  # a collection inside a timed stretch would be charged to the device
    try:
        timings = {}
        for k in names:
            call = calls[k]
            limit = min(MAX_CALLS, (limits or {}).get(k, burst_limit(call)))
            if call is None or limit < MIN_CALLS:
                timings[k] = Timing(1)
            else:
                run = partial(burst, call)
                timings[k] = Timing(choose_calls(lambda n: agree(run(n)), limit))
            emit("tick", samples=0)
        timed = dict.fromkeys(names, 0.0)
        wall_start = last_beat = time.perf_counter()
        wall_cap = opts.min_time_s * WALL_FACTOR * len(names)
        for r in range(MAX_SAMPLES):
            first = r % len(names)
            for k in names[first:] + names[:first]:
                t, call = timings[k], calls[k]
                if t.calls_per_sample == 1 or call is None:
                    seconds = alone[k]()
                    t.per_call.append(seconds)
                    timed[k] += seconds
                else:
                    one = alone[k]() if agree(t.wants_single(timed[k])) else None
                    wall = burst(call, t.calls_per_sample)
                    t.per_call.append(wall / t.calls_per_sample)
                    if one is not None:
                        t.single.append(one)
                        t.extra.append(one - t.per_call[-1])
                    timed[k] += wall
                now = time.perf_counter()
                if now - last_beat >= HEARTBEAT_S:  # after each cell's turn
                    emit("tick", samples=r + 1)
                    last_beat = now
            if agree(r + 1 >= opts.repeats and (min(timed.values()) >= opts.min_time_s or now - wall_start >= wall_cap)):
                break
    finally:
        gc.enable()
    return timings


def environment(jax, np, local: list, opts: Any, sweep_note: str | None, **extra: Any) -> dict:
    """A plan event's environment (model.bench.RunEnvironment): what every bench's run was on (versions, the machine,
    the settings of the environment that change it), the settings every bench has, `extra`."""
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
        "warmups": opts.warmups,
        "quick": opts.quick,
        "sweep_note": sweep_note,
        **extra,
    }


def emit_plan(devices: list, **fields: Any) -> None:
    """A bench child's `plan` event: its devices' facts, then `fields` in the order given."""
    emit("plan", devices=[to_jsonable(device_info(d)) for d in devices], **fields)


def chained(first: Any, step: Callable[[Any], Any]) -> Callable[[], Any]:
    """A call that feeds each result to the next: step(first), then step of that, and so on."""
    last = [first]

    def call() -> Any:
        last[0] = step(last[0])
        return last[0]

    return call


# ---- the per-device engine: bench memory and bench matmul are recipes run by it -------------------------------


@dataclass
class Group:
    """Cells measured together, every device taking turns: a recipe's unit of work (one size; one dtype and size)."""

    base: Callable[[str], Any]  # device name -> its cell without figures (the recipe's cell dataclass)
    need_bytes: int  # device memory one device's cell holds
    what: str  # how a skipped cell names what did not fit
    make: Callable[[Any], Any] | None  # device -> its call (.verified, .in_place, .max_burst, .last_problem(): bench_memory.Copy); None: all skipped
    notes: tuple[str, ...] = ()  # what to know about every cell of the group (a size rounded down)


@dataclass
class Recipe:
    """A per-device bench: its groups, the work one call does, the figure's fields and its roof."""

    work: Callable[[Any], int]  # a cell -> bytes moved or flops per call
    scale: float  # work per second -> the figure's unit (1e9: GB/s; 1e12: TFLOP/s)
    fields: tuple[str, str, str]  # the cell's figure, fastest-sample figure and roof fields
    roof: Callable[[Any, Any], float | None]  # (device, cell) -> the published peak
    wrong: Callable[[Any], str]  # a cell -> the note of a result wrong after the first call
    unit_word: str  # "bandwidth", "TFLOP/s": what is not reported when the last check could not run


def run_recipe(options: type, recipe: Recipe, plan: Callable[[Any, Any, Any, str], tuple[list[Group], str | None, dict]]) -> int:
    """A per-device probe child: the devices --device names, the groups planned (`plan(opts, jax, np, platform)`:
    the groups, the sweep note and the plan event's extra fields), then each group measured and its cells emitted."""

    def body(opts: Any, jax: Any, np: Any) -> dict:
        local = local_devices(jax)
        devices = resolve_devices(opts, local)
        groups, note, extra = plan(opts, jax, np, devices[0].platform)
        env = environment(jax, np, local, opts, note, min_time_s=opts.min_time_s, burst_min_s=BURST_MIN_S)
        emit_plan(devices, environment=env, cells=len(devices) * len(groups), **extra)
        for group in groups:
            for c in measure_group(devices, group, recipe, opts):
                emit("cell", **to_jsonable(c))
            gc.collect()  # free this group's buffers before the next one allocates
        return {}

    return run_child(options, body)


def measure_group(devices: list, group: Group, recipe: Recipe, opts: ChipOptions) -> list:
    """Every device's cell of the group: each prepared (or skipped, with why), timed taking turns, checked after its
    last call, and its figure set against its roof."""
    if group.make is None:
        return [replace(group.base(device_name(d)), skipped=True, note=group.what) for d in devices]
    ready: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for dev in devices:
        # Checked device by device as the buffers are made: on CPU the devices share host memory, and what the
        # devices before this one hold is already gone from what is available.
        why = room_problem([dev], group.need_bytes, group.what)
        if why:
            skipped[device_name(dev)] = why
            continue
        try:
            ready[device_name(dev)] = group.make(dev)
            emit("tick", samples=0)  # making the buffers and compiling is work too: the watchdog hears of it
        except Exception as e:  # an out-of-memory or a backend refusal costs this device's cell, not the run
            skipped[device_name(dev)] = failure_note(e)
    try:
        timings = time_interleaved(dict(ready), opts) if ready else {}
    except Exception as e:
        skipped.update(dict.fromkeys(ready, failure_note(e)))
        timings = {}
    cells = []
    for dev in devices:
        name = device_name(dev)
        base = group.base(name)
        if name not in timings:
            cells.append(replace(base, skipped=True, note=skipped.get(name, "skipped")))
            continue
        call = ready[name]
        notes = list(group.notes)
        if not call.in_place:
            notes.append(f"the backend did not reuse the donated buffer: each call also allocated its result, and a burst holds {MIN_CALLS} calls")
        verified = bool(call.verified)
        if not verified:
            notes.append(recipe.wrong(base))
        else:
            try:
                problem = call.last_problem()
            except Exception as e:  # the check could not run (out of memory): the figure stands unverified
                problem = f"the final check could not run ({failure_note(e)}): no {recipe.unit_word} reported"
            if problem:
                verified = False
                notes.append(problem)
        cells.append(figures(dev, base, timings[name], verified, "; ".join(notes) or None, recipe))
    ready.clear()
    return cells


def figures(dev, base: Any, timing: Timing, verified: bool, note: str | None, recipe: Recipe) -> Any:
    """The cell with its timing, its figure (from the median; none when the result was wrong), its fastest sample's
    figure, its roof and its share of it."""
    st = timing.stats()
    work = recipe.work(base)
    value = work / st["median_s"] / recipe.scale if verified and st["median_s"] else None
    peak = work / st["min_s"] / recipe.scale if value and st["min_s"] else None
    roof = recipe.roof(dev, base)
    value_f, peak_f, roof_f = recipe.fields
    return replace(
        base, **st, verified=verified, note=note,
        **{value_f: value, peak_f: peak, roof_f: roof}, pct_of_roof=100 * value / roof if value and roof else None,
    )  # fmt: skip
