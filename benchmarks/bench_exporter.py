"""How long a scrape of `devctl exporter` takes, and what the exporter costs while Prometheus scrapes it.

Figures are recorded in benchmarks/README.md ("## exporter"). Issue 15's goals: with 8 forced CPU devices and 4
publishing jobs, a scrape's median at most 20 ms after the first; at a 15 s scrape interval, at most 0.5% of one
core, and memory flat over 10 minutes (RSS at start and end).

1. Start 4 publishing JAX jobs (8 forced CPU devices each, arrays on every device) and `devctl exporter`.
2. Scrape /metrics --scrapes times back to back (after the first, which pays the imports): wall time per scrape.
3. --soak S: scrape every --interval seconds for S seconds; the exporter's CPU time (user + system, its children
   included) and RSS at the start and the end of the soak.

Usage: python benchmarks/bench_exporter.py [--scrapes 50] [--soak 600] [--interval 15]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
JOB = r"""
import json, sys, time
import numpy as np
import jax
import devctl.publish
arrays = [jax.device_put(np.zeros((i + 1) << 20, np.uint8), d) for i, d in enumerate(jax.devices())]
devctl.publish.publish(interval=1.0)
print(json.dumps({"ready": True}), flush=True)
time.sleep(100000)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--soak", type=float, default=0.0, help="seconds of scraping at --interval (0: none)")
    ap.add_argument("--interval", type=float, default=15.0)
    args = ap.parse_args()

    runtime = Path(tempfile.mkdtemp(prefix="devctl-bench-exporter-")) / "runtime"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "DEVCTL_RUNTIME_DIR": str(runtime),
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={args.devices}"}  # fmt: skip
    jobs = [subprocess.Popen([sys.executable, "-c", JOB], env=env, stdout=subprocess.PIPE, text=True) for _ in range(args.jobs)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exporter = subprocess.Popen([sys.executable, "-m", "devctl", "exporter", "--listen", f"127.0.0.1:{port}"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for j in jobs:
            json.loads(j.stdout.readline())
        while True:
            try:
                body = urllib.request.urlopen(url, timeout=30).read().decode()
                if body.count("devctl_job_live_array_bytes{") >= args.jobs * args.devices:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        times = []
        for _ in range(args.scrapes):
            started = time.perf_counter()
            body = urllib.request.urlopen(url, timeout=30).read()
            times.append(time.perf_counter() - started)
        series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        q = statistics.quantiles(times, n=10)
        print(f"machine: {os.cpu_count()} CPUs; {args.jobs} publishing jobs x {args.devices} CPU devices; {series} series a scrape")
        print(f"scrape wall time over {len(times)} scrapes after the first: median {statistics.median(times) * 1e3:.1f} ms, "
              f"p10 {q[0] * 1e3:.1f} ms, p90 {q[-1] * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms")  # fmt: skip
        if args.soak > 0:
            proc = psutil.Process(exporter.pid)

            def cpu() -> float:
                t = proc.cpu_times()
                return t.user + t.system + t.children_user + t.children_system

            rss0, cpu0, t0 = proc.memory_info().rss, cpu(), time.monotonic()
            while time.monotonic() - t0 < args.soak:
                urllib.request.urlopen(url, timeout=30).read()
                time.sleep(args.interval)
            rss1, cpu1, elapsed = proc.memory_info().rss, cpu(), time.monotonic() - t0
            print(f"soak: {elapsed:.0f} s scraped every {args.interval:g} s: CPU {100 * (cpu1 - cpu0) / elapsed:.3f}% of one core; "
                  f"RSS {rss0 / 2**20:.1f} MiB at start, {rss1 / 2**20:.1f} MiB at the end")  # fmt: skip
    finally:
        for p in (exporter, *jobs):
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
