"""Issue 3 budgets for `devctl memstats --watch`, measured.

    python benchmarks/bench_memstats_watch.py [--devices 8] [--seconds 20] [--frame-only]

1. One refresh beyond the first snapshot (MemstatsSampler.sample) with N forced CPU devices and a
   publishing job: target <= 10 ms.
2. The watch process's CPU at 1 Hz, after its first snapshot: target <= 2% of one core.
3. One frame of the live view (WatchView.add and its lines, 200 x 50) of the goldens' 8-GPU node with GPM
   busy-ness, the busy history full (issue 25), beside the same frame without busy-ness (no busy history).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def env(devices: int, runtime_dir: str) -> dict[str, str]:
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e["DEVCTL_RUNTIME_DIR"] = runtime_dir
    return e


def start_publisher(devices: int, runtime_dir: str) -> subprocess.Popen:
    code = textwrap.dedent(
        """
        import time, jax, jax.numpy as jnp, devctl.publish
        arrays = [jax.device_put(jnp.zeros(1 << 16), d) for d in jax.devices() for _ in range(10)]
        devctl.publish.publish(interval=1.0)
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env(devices, runtime_dir), stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    time.sleep(1.5)  # first snapshot written
    return proc


def sample_cost(devices: int, runtime_dir: str, samples: int) -> tuple[float, float, float, int]:
    code = textwrap.dedent(
        f"""
        import time, statistics
        from devctl.collect.memstats import MemstatsSampler
        s = MemstatsSampler(device_filter=None, timeout_s=30)
        first = s.first()
        times = []
        for _ in range({samples}):
            t0 = time.perf_counter(); snap = s.sample(); times.append(time.perf_counter() - t0)
        times.sort()
        print(statistics.median(times), times[0], times[-1], len(snap.devices), len(snap.processes))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(devices, runtime_dir), capture_output=True, text=True, check=True).stdout
    med, lo, hi, ndev, nproc = out.split()
    return float(med), float(lo), float(hi), int(ndev)


def watch_cpu(devices: int, runtime_dir: str, seconds: float) -> float:
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "devctl", "memstats", "--watch", "--interval", "1", "--json"],
        env=env(devices, runtime_dir), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    proc.stdout.readline()  # first snapshot done: the probe child has exited
    p = psutil.Process(proc.pid)
    t0, c0 = time.monotonic(), sum(p.cpu_times()[:2])
    end = t0 + seconds
    while time.monotonic() < end:
        proc.stdout.readline()
    t1, c1 = time.monotonic(), sum(p.cpu_times()[:2])
    proc.terminate()
    proc.wait()
    return 100 * (c1 - c0) / (t1 - t0)


def frame_cost(frames: int) -> tuple[float, float]:
    """Median seconds of one live-view frame, with and without busy-ness (and so the busy history)."""
    import dataclasses
    import statistics

    sys.path.insert(0, str(ROOT / "tests"))
    from golden_reports import memstats_gpu8

    from devctl.render.memstats import WatchView

    busy = memstats_gpu8()
    idle = dataclasses.replace(busy, devices=[dataclasses.replace(d, busy=None) for d in busy.devices])
    medians = []
    for snapshot in (busy, idle):
        view = WatchView()
        for n in range(20):  # every history full
            view.add(snapshot)
            view.lines(snapshot, 1.0, n + 1, 200, 50)
        times = []
        for n in range(frames):
            t0 = time.perf_counter()
            view.add(snapshot)
            view.lines(snapshot, 1.0, n + 21, 200, 50)
            times.append(time.perf_counter() - t0)
        medians.append(statistics.median(times))
    return medians[0], medians[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--frame-only", action="store_true", help="only the live view's frame (3.): no JAX, no publisher")
    args = ap.parse_args()
    with_busy, without = frame_cost(args.frames)
    print(f"one live-view frame, 8 GPUs, 200 x 50: {with_busy * 1e3:.2f} ms median with busy-ness and its history full, "
          f"{without * 1e3:.2f} ms without, over {args.frames}")  # fmt: skip
    if args.frame_only:
        return
    runtime_dir = tempfile.mkdtemp(prefix="devctl-bench-")
    os.chmod(runtime_dir, 0o700)
    pub = start_publisher(args.devices, runtime_dir)
    try:
        med, lo, hi, ndev = sample_cost(args.devices, runtime_dir, args.samples)
        print(f"one refresh beyond the first snapshot, {ndev} devices + 1 publisher: median {med * 1e3:.2f} ms (min {lo * 1e3:.2f}, max {hi * 1e3:.2f}) over {args.samples}")
        cpu = watch_cpu(args.devices, runtime_dir, args.seconds)
        print(f"devctl memstats --watch at 1 Hz, {args.devices} devices + 1 publisher: {cpu:.2f}% of one core over {args.seconds:g} s")
    finally:
        pub.kill()


if __name__ == "__main__":
    main()
