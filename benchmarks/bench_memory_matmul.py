"""Do `devctl bench memory` and `devctl bench matmul` measure what a bare loop measures, and how long do they take?

Figures are recorded in benchmarks/README.md ("## bench memory", "## bench matmul").

1. Wall time of `--quick` and of the default run, each command, in fresh processes (target: --quick < 15 s).
2. Fidelity, end to end: devctl's median for cpu:0 against a hand-written loop in a fresh process that does
   nothing but the same jitted call and block_until_ready (memory: x + 1 into a donated buffer at 256 MiB, and
   numpy's np.add(x, 1, out=y) beside it as the host's own figure; matmul: f32 at Precision.HIGHEST, n = 1024).
   The two alternate, `--rounds` times each. Since issue 20 devctl times bursts of calls and one sync, and this
   one-call loop is the old method's figure: benchmarks/bench_chip_bursts.py sets devctl beside a burst loop.

Usage: python benchmarks/bench_memory_matmul.py [--rounds 3] [--skip-wall] [--devices 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HAND_MEMORY = r"""
import json, statistics, time
import jax, jax.numpy as jnp, numpy as np
n = (256 << 20) // 4
dev = jax.devices()[0]
one = jnp.uint32(1)
bufs = list(jax.jit(lambda: (jnp.arange(n, dtype=jnp.uint32), jnp.zeros(n, jnp.uint32)), out_shardings=jax.sharding.SingleDeviceSharding(dev))())
f = jax.jit(lambda a, b: a + one, donate_argnums=1, keep_unused=True)
ts = []
for i in range(12):
    t0 = time.perf_counter(); out = f(bufs[0], bufs[1]); out.block_until_ready(); t = time.perf_counter() - t0
    bufs = [out, bufs[0]]
    if i >= 2: ts.append(t)
x = np.ones(n, np.uint32); y = np.zeros(n, np.uint32)
nps = []
for i in range(12):
    t0 = time.perf_counter(); np.add(x, 1, out=y); t = time.perf_counter() - t0
    if i >= 2: nps.append(t)
print(json.dumps({"jax": 2 * (256 << 20) / statistics.median(ts) / 1e9, "numpy": 2 * (256 << 20) / statistics.median(nps) / 1e9}))
"""

HAND_MATMUL = r"""
import json, statistics, time
import jax, jax.numpy as jnp
n = 1024
ka, kb = jax.random.split(jax.random.key(0))
a = jax.random.normal(ka, (n, n), jnp.float32); b = jax.random.normal(kb, (n, n), jnp.float32)
f = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))
ts = []
for i in range(20):
    t0 = time.perf_counter(); f(a, b).block_until_ready(); t = time.perf_counter() - t0
    if i >= 2: ts.append(t)
print(json.dumps({"jax": 2 * n**3 / statistics.median(ts) / 1e12}))
"""


def env(devices: int) -> dict[str, str]:
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["JAX_PLATFORMS"] = "cpu"
    e["PYTHONPATH"] = str(ROOT)
    return e


def devctl(*args: str, devices: int) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "devctl", *args, "--json"], env=env(devices), capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout)


def hand(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code], env=env(1), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--skip-wall", action="store_true")
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if not a.skip_wall:
        for command in ("memory", "matmul"):
            quick = [devctl("bench", command, "--quick", devices=a.devices)[0] for _ in range(3)]
            full, doc = devctl("bench", command, devices=a.devices)
            print(f"bench {command} --quick wall: {', '.join(f'{t:.1f}' for t in quick)} s; default: {full:.1f} s")
            for comp in doc.get("comparisons") or [doc["comparison"]]:
                figures = ", ".join(f"{f['device']} {f['value']:.3g}" for f in comp["figures"] if f["value"])
                print(f"  default, best {comp['metric']} {comp['unit']}: {figures}; median {comp['median']:.3g}; "
                      f"stragglers: {[s['name'] for s in comp['stragglers']] or 'none'}")
    ratios: dict[str, list[float]] = {"memory": [], "numpy": [], "matmul": []}
    for _ in range(a.rounds):
        _, mem = devctl("bench", "memory", "--sizes", "256M", "--device", "0", "--repeats", "10", devices=1)
        h = hand(HAND_MEMORY)
        ours = mem["results"][0]["gbps"]
        ratios["memory"].append(ours / h["jax"])
        ratios["numpy"].append(ours / h["numpy"])
        print(f"memory 256M: devctl {ours:.2f} GB/s, hand jax loop {h['jax']:.2f}, numpy np.add(out=) {h['numpy']:.2f}")
        _, mm = devctl("bench", "matmul", "--dtype", "f32", "--sizes", "1024", "--device", "0", "--repeats", "10", devices=1)
        h = hand(HAND_MATMUL)
        ours = mm["results"][0]["tflops"]
        ratios["matmul"].append(ours / h["jax"])
        print(f"matmul f32 n=1024: devctl {ours:.3f} TFLOP/s, hand loop {h['jax']:.3f}")
    for k, v in ratios.items():
        print(f"ratio devctl / hand ({k}): median {statistics.median(v):.2f}, range {min(v):.2f} - {max(v):.2f}")


if __name__ == "__main__":
    main()
