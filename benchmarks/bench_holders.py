"""What `devctl memstats --pid PID --top N` costs the job, and what publishing costs it when nobody asks.

Figures are recorded in benchmarks/README.md ("## what holds the memory"). Issue 16's budgets: a `--top` request
costs the job at most 50 ms of CPU with 2,000 live arrays; the publisher stays within 1% of one core at 1 Hz
when nobody asks.

A job on 4 forced CPU devices holds --arrays live arrays (created on 20 different lines, some sharded over every
device), publishes every second, and is asked --requests times for its top 20. The job measures its own CPU time
for each answer (`cost_s`, thread CPU time) and for each snapshot (`snapshot_s`); the job's whole CPU time is
read from /proc over --idle seconds in which nobody asks.

Usage: python benchmarks/bench_holders.py [--arrays 2000] [--requests 10] [--idle 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
JOB = r"""
import json, sys, time
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import devctl.publish
n = int(sys.argv[1])
mesh = Mesh(np.array(jax.devices()), ("x",))
def make(i):
    if i % 10 == 0:
        return jax.device_put(np.zeros(4096, np.float32), NamedSharding(mesh, P("x")))
    return jnp.full((256,), i % 20, jnp.float32)
held = [make(i) for i in range(n)]
devctl.publish.publish(interval=1.0)
print(json.dumps({"ready": True}), flush=True)
time.sleep(100000)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arrays", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--idle", type=float, default=30.0)
    args = ap.parse_args()
    runtime = Path(tempfile.mkdtemp(prefix="devctl-bench-holders-")) / "runtime"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "DEVCTL_RUNTIME_DIR": str(runtime),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}  # fmt: skip
    job = subprocess.Popen([sys.executable, "-c", JOB, str(args.arrays)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        json.loads(job.stdout.readline())
        time.sleep(2)
        proc = psutil.Process(job.pid)
        cpu0, t0 = sum(proc.cpu_times()[:2]), time.monotonic()
        time.sleep(args.idle)
        idle_pct = 100 * (sum(proc.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
        snapshot = json.loads((runtime / f"{job.pid}.json").read_text())
        costs, walls = [], []
        for _ in range(args.requests):
            started = time.monotonic()
            out = subprocess.run([sys.executable, "-m", "devctl", "memstats", "--pid", str(job.pid), "--top", "20", "--json"],
                                 env=env, capture_output=True, text=True, check=True)  # fmt: skip
            walls.append(time.monotonic() - started)
            doc = json.loads(out.stdout)
            costs.append(doc["cost_s"])
        print(f"machine: {os.cpu_count()} CPUs; a job with {doc['total_arrays']} live arrays on 4 CPU devices, publishing every 1 s")
        print(f"nobody asking: the job's CPU over {args.idle:g} s, {idle_pct:.2f}% of one core; one snapshot {snapshot.get('snapshot_s', 0) * 1e3:.1f} ms")
        print(f"--top 20 over {len(costs)} requests: the job's CPU per answer median {statistics.median(costs) * 1e3:.1f} ms, "
              f"max {max(costs) * 1e3:.1f} ms; devctl's wall time per request median {statistics.median(walls):.2f} s")  # fmt: skip
    finally:
        job.kill()
        job.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
