"""What `devctl.publish.publish()` costs the job that calls it.

Budget (issue 3): <= 1% of one core at 1 Hz. One process with N forced CPU
devices and a few hundred live arrays (a third sharded over all devices, a
third replicated, a third single-device), measured three ways:

1. per snapshot, build_snapshot() as the publisher thread calls it, in three
   situations: the same arrays as last time (facts cached), a training step
   in between (every array new: nothing cached, the usual case), and a step
   plus a host fetch of every sharded array (per-shard alias arrays exist and
   must be resolved: the worst case). Wall time is how long the thread can
   hold the GIL, i.e. the longest stall it can cause a Python training loop;
2. the publisher thread itself at --interval for --seconds while the main
   thread runs training steps (~10/s), then steps each followed by a host
   fetch of every sharded array: its CPU time (psutil per-thread) over the
   window, as % of one core, including JSON encoding, the file write and
   whatever garbage collection its allocations trigger;
3. whole-process CPU, main thread idle (arrays unchanged), with and without
   the publisher, before and after the host-fetch run: a cross-check that
   counts everything the publisher causes (noisier).

Usage: python benchmarks/bench_publish_overhead.py [--devices 8] [--arrays 300] [--seconds 20] [--interval 1.0]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def main() -> None:
    args = _parse()
    # Before jax is imported anywhere: the device count is read once.
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    runtime_dir = tempfile.mkdtemp(prefix="devctl-bench-")
    os.environ["DEVCTL_RUNTIME_DIR"] = runtime_dir
    try:
        _run(args)
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


def _run(args: argparse.Namespace) -> None:
    import jax
    import psutil

    import devctl.publish as monitor

    state = _allocate(args.arrays)
    step = _make_step()
    state = step(state)  # compile outside every measurement
    jax.block_until_ready(state)
    print(f"jax {jax.__version__}, {len(jax.devices())} {jax.devices()[0].platform} devices, "
          f"{len(state)} arrays ({len(jax.live_arrays())} live array objects), {psutil.cpu_count()} CPUs")

    state = per_snapshot(state, step, args.repeats)
    state = thread_cost(monitor, psutil, state, step, args.interval, args.seconds, fetch=False)
    process_cost(monitor, psutil, args.interval, args.seconds, "no host fetch")
    state = thread_cost(monitor, psutil, state, step, args.interval, args.seconds, fetch=True)
    process_cost(monitor, psutil, args.interval, args.seconds, "after host fetches")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=8)
    p.add_argument("--arrays", type=int, default=300)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=50)
    return p.parse_args()


def _allocate(n: int) -> list:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devs = jax.devices()
    mesh = Mesh(np.array(devs), ("x",))
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append(jax.device_put(np.zeros((len(devs) * 64, 256), np.float32), NamedSharding(mesh, P("x"))))
        elif i % 3 == 1:
            out.append(jax.device_put(np.zeros((256,), np.float32), NamedSharding(mesh, P())))
        else:
            out.append(jax.device_put(np.zeros((128, 128), np.float32), devs[i % len(devs)]))
    return out


def _make_step():
    """A stand-in for a training step: every array replaced by a new one, shardings kept, inputs donated.

    One jitted call per group of arrays on the same devices (a jit cannot mix
    arrays committed to different devices).
    """
    import jax

    update = jax.jit(lambda xs: [x + 1 for x in xs], donate_argnums=0)

    def step(xs: list) -> list:
        groups: dict[tuple, list[int]] = {}
        for i, x in enumerate(xs):
            groups.setdefault(tuple(sorted(d.id for d in x.sharding.device_set)), []).append(i)
        out = list(xs)
        for idx in groups.values():
            for i, y in zip(idx, update([xs[i] for i in idx])):
                out[i] = y
        return out

    return step


def per_snapshot(state: list, step, repeats: int):
    import jax

    from devctl.publish.document import build_snapshot, encode
    from devctl.publish.live_arrays import ArrayCache

    cache = ArrayCache()

    def snap():
        return build_snapshot(interval_s=1.0, top_k=10, initialize=False, cache=cache)

    def run(label: str, prepare) -> None:
        nonlocal state
        walls, cpus = [], []
        for _ in range(repeats):
            state = prepare(state)
            w, c = _timed(snap)
            walls.append(w)
            cpus.append(c)
        print(f"snapshot, {label}: wall median {statistics.median(walls) * 1e3:.2f} ms, "
              f"p90 {_pct(walls, 90) * 1e3:.2f}, max {max(walls) * 1e3:.2f} ms; "
              f"thread CPU median {statistics.median(cpus) * 1e3:.2f} ms, max {max(cpus) * 1e3:.2f} ms "
              f"({len(jax.live_arrays())} live array objects)")

    def new_step(s):
        s = step(s)
        jax.block_until_ready(s)
        return s

    def step_and_fetch(s):
        s = new_step(s)
        _fetch_sharded(s)
        return s

    snap()
    run("same arrays (cached)", lambda s: s)
    run("after a training step (all arrays new)", new_step)
    run("after a step + host fetch of sharded arrays (aliases)", step_and_fetch)
    state = new_step(state)
    doc = snap()
    enc = statistics.median(_timed(lambda: encode(doc))[0] for _ in range(repeats))
    print(f"JSON encoding: {enc * 1e3:.3f} ms ({len(encode(doc))} bytes)")
    return state


def _fetch_sharded(state: list) -> None:
    """What a checkpoint save does: every sharded array to the host."""
    import numpy as np

    for x in state:
        if len(x.sharding.device_set) > 1:
            np.asarray(x)


def thread_cost(monitor, psutil, state: list, step, interval: float, seconds: float, fetch: bool):
    import jax

    pub = monitor.publish(interval=interval)
    time.sleep(0.3)
    tid = pub._thread.native_id
    before = _thread_cpu(psutil, tid)
    written0 = pub.snapshots_written
    steps = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        state = step(state)
        jax.block_until_ready(state)
        if fetch:
            _fetch_sharded(state)
        steps += 1
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    used = _thread_cpu(psutil, tid) - before
    n = pub.snapshots_written - written0
    monitor.stop()
    what = "steps, each followed by a host fetch of every sharded array" if fetch else "steps"
    print(f"publisher thread at {1 / interval:g} Hz for {elapsed:.1f} s while the main thread ran {steps} {what}: "
          f"{n} snapshots, {used * 1e3:.0f} ms CPU = {used / elapsed * 100:.3f}% of one core "
          f"({used / max(n, 1) * 1e3:.2f} ms per snapshot incl. encode + write; psutil resolution 10 ms)")
    return state


def process_cost(monitor, psutil, interval: float, seconds: float, label: str) -> None:
    import jax

    me = psutil.Process()

    def window() -> float:
        t = me.cpu_times()
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = me.cpu_times()
        return ((t1.user + t1.system) - (t.user + t.system)) / (time.monotonic() - t0)

    idle = window()
    monitor.publish(interval=interval)
    time.sleep(0.3)
    busy = window()
    monitor.stop()
    print(f"whole process, main thread idle, {label} ({len(jax.live_arrays())} live array objects): "
          f"without publisher {idle * 100:.3f}% of one core, "
          f"with {busy * 100:.3f}% -> publisher adds {(busy - idle) * 100:.3f}%")


def _thread_cpu(psutil, tid: int) -> float:
    for t in psutil.Process().threads():
        if t.id == tid:
            return t.user_time + t.system_time
    raise RuntimeError("publisher thread not found")


def _timed(fn) -> tuple[float, float]:
    c0, w0 = time.thread_time(), time.perf_counter()
    fn()
    return time.perf_counter() - w0, time.thread_time() - c0


def _pct(values: list[float], q: int) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q / 100))]


if __name__ == "__main__":
    sys.exit(main())
