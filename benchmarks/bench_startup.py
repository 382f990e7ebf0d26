"""Issue 2 speed targets, measured side by side in one run.

    python benchmarks/bench_startup.py [--runs N]

1. `devctl --help` wall time (target: median <= 100 ms).
2. `devctl list --json` on CPU against `python -c "import jax; jax.devices()"` (target: <= 1.15x).
3. `devctl list --json` with 1, 8 and 64 forced CPU devices (target: no worse than linear growth).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def env(devices: int = 1) -> dict[str, str]:
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e.pop("JAX_PLATFORMS", None)
    return e


def timed(cmd: list[str], e: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def median_of(cmd: list[str], e: dict[str, str], runs: int) -> tuple[float, float, float]:
    samples = sorted(timed(cmd, e) for _ in range(runs))
    return statistics.median(samples), samples[0], samples[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=11)
    args = ap.parse_args()
    py = sys.executable
    devctl = [py, "-m", "devctl"]
    timed(devctl + ["list", "--json"], env())  # warm the page cache and .pyc files

    med, lo, hi = median_of(devctl + ["--help"], env(), args.runs)
    print(f"devctl --help: median {med * 1e3:.0f} ms (min {lo * 1e3:.0f}, max {hi * 1e3:.0f}) over {args.runs} runs")
    med, lo, hi = median_of([py, "-c", "pass"], env(), args.runs)
    print(f"python -c pass (interpreter floor): median {med * 1e3:.0f} ms")

    # Interleave the two so machine noise hits both alike.
    ours, theirs = [], []
    for _ in range(args.runs):
        theirs.append(timed([py, "-c", "import jax; jax.devices()"], env()))
        ours.append(timed(devctl + ["list", "--json"], env()))
    m_ours, m_theirs = statistics.median(ours), statistics.median(theirs)
    print(f"devctl list --json: median {m_ours:.3f} s; import jax; jax.devices(): median {m_theirs:.3f} s; ratio {m_ours / m_theirs:.2f}x")

    for n in (1, 8, 64):
        med, lo, hi = median_of(devctl + ["list", "--json"], env(n), max(3, args.runs // 2))
        print(f"devctl list --json, {n:3d} devices: median {med:.3f} s (min {lo:.3f}, max {hi:.3f})")


if __name__ == "__main__":
    main()
