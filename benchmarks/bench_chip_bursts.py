"""Does burst timing give `devctl bench memory` and `bench matmul` the figure JAX itself reaches (issue 20)?

Each round, alternating, in fresh processes with 4 forced CPU devices:
  - devctl now (`--json`): every device's median figure, its calls per sample and its per-call overhead;
  - with `--before DIR`, devctl from another checkout (e.g. `git worktree add /tmp/before <commit>`), which timed
    one call + block_until_ready per sample;
  - a hand-written JAX loop on cpu:0 doing only the same jitted call (memory: x + 1 into a donated buffer,
    ping-pong; matmul: the dot at the same precision): CALLS calls dispatched back to back then one
    block_until_ready (the burst figure, as the H200 ground truth was taken: reference/h200-observations.md 2),
    and one call + block_until_ready (the old way).

Cases: the two `--quick` runs (memory 256M; matmul 512, bf16 and f32), and small sizes where the per-call cost
of a CPU call (~0.1 ms) is a large share of the call (memory 1M, matmul f32 128).

Usage: python benchmarks/bench_chip_bursts.py [--rounds 3] [--before DIR]
Figures are recorded in benchmarks/README.md ("## bench memory and bench matmul: burst timing").
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

HAND = r"""
import json, statistics, sys, time
import jax, jax.numpy as jnp
kind, arg, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dev = jax.devices()[0]
on = jax.sharding.SingleDeviceSharding(dev)
if kind == "memory":
    n = arg // 4
    one = jnp.uint32(1)
    bufs = list(jax.jit(lambda: (jnp.arange(n, dtype=jnp.uint32), jnp.zeros(n, jnp.uint32)), out_shardings=on)())
    f = jax.jit(lambda a, b: a + one, donate_argnums=1, keep_unused=True)
    def call():
        out = f(bufs[0], bufs[1]); bufs[:] = [out, bufs[0]]; return out
    work = 2 * n * 4 / 1e9  # GB read + written
else:
    n = arg
    jd = {"bf16": jnp.bfloat16, "f32": jnp.float32}[dtype]
    prec = jax.lax.Precision.HIGHEST if dtype == "f32" else jax.lax.Precision.DEFAULT
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.jit(lambda k: jax.random.normal(k, (n, n), jd), out_shardings=on)(ka)
    b = jax.jit(lambda k: jax.random.normal(k, (n, n), jd), out_shardings=on)(kb)
    f = jax.jit(lambda x, y: jnp.matmul(x, y, precision=prec))
    def call():
        return f(a, b)
    work = 2 * n**3 / 1e12  # TFLOP
for _ in range(3):
    call().block_until_ready()
t = time.perf_counter(); call().block_until_ready(); one_s = time.perf_counter() - t
calls = max(20, min(1000, int(0.1 / max(one_s, 1e-6))))  # a burst of 0.1 s at least, 20 calls at least
bursts, singles = [], []
for _ in range(5):
    t = time.perf_counter()
    for _ in range(calls):
        out = call()
    out.block_until_ready()
    bursts.append((time.perf_counter() - t) / calls)
    for _ in range(2):
        t = time.perf_counter(); call().block_until_ready(); singles.append(time.perf_counter() - t)
print(json.dumps({"calls": calls, "burst": work / statistics.median(bursts), "single": work / statistics.median(singles)}))
"""

CASES = [
    # name, devctl args, hand-loop args, figure key
    ("memory --quick (256M)", ["bench", "memory", "--quick"], ("memory", 256 << 20, "-"), "gbps"),
    ("memory 1M", ["bench", "memory", "--sizes", "1M"], ("memory", 1 << 20, "-"), "gbps"),
    ("matmul --quick bf16 512", ["bench", "matmul", "--quick"], ("matmul", 512, "bf16"), "tflops"),
    ("matmul --quick f32 512", None, ("matmul", 512, "f32"), "tflops"),  # the same devctl run as the line above
    ("matmul f32 128", ["bench", "matmul", "--dtype", "f32", "--sizes", "128"], ("matmul", 128, "f32"), "tflops"),
]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    e["JAX_PLATFORMS"] = "cpu"
    return e


def devctl(checkout: Path, args: list[str]) -> tuple[float, dict]:
    """One run from `checkout` (cwd and PYTHONPATH both: `python -m` puts the cwd first on sys.path)."""
    e = env()
    e["PYTHONPATH"] = str(checkout)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "devctl", *args, "--json"], cwd=checkout, env=e, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, json.loads(proc.stdout)


def hand(kind: str, arg: int, dtype: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", HAND, kind, str(arg), dtype], env=env(), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summary(doc: dict, key: str, dtype: str | None) -> str:
    cells = [c for c in doc["results"] if c.get(key) and (dtype is None or c.get("dtype") == dtype)]
    values = [c[key] for c in cells]
    text = f"{statistics.median(values):.3g} (devices {min(values):.3g} - {max(values):.3g})"
    if cells and "calls_per_sample" in cells[0]:
        calls = sorted(c["calls_per_sample"] for c in cells)
        overhead = statistics.median(c["call_overhead_s"] for c in cells) * 1e3
        text += f", {calls[0]}-{calls[-1]} calls per sample, per call +{overhead:.3f} ms"
    return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--before", type=Path, help="another checkout of devctl to run beside this one")
    a = ap.parse_args()
    for r in range(a.rounds):
        print(f"round {r + 1}, load average {os.getloadavg()[0]:.2f}")
        docs: dict[tuple[str, str], dict] = {}
        for name, args, (kind, arg, dtype), key in CASES:
            if args is not None:
                for label, checkout in (("before", a.before), ("now", ROOT)):
                    if checkout is None:
                        continue
                    wall, docs[(label, kind)] = devctl(checkout, args)
                    print(f"  {name}: devctl {label} ({wall:.1f} s)")
            h = hand(kind, arg, dtype)
            unit = "GB/s" if kind == "memory" else "TFLOP/s"
            for label in ("before", "now"):
                if (label, kind) in docs:
                    print(f"    {name} devctl {label}: {summary(docs[(label, kind)], key, None if kind == 'memory' else dtype)} {unit}")
            print(f"    {name} hand loop cpu:0: {h['calls']} calls then one sync {h['burst']:.3g}; one call + sync {h['single']:.3g} {unit}")


if __name__ == "__main__":
    main()
