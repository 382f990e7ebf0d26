"""Does the regression gate of `devctl bench transfer` stay quiet on identical reruns and catch a real slowdown?

Figures are recorded in benchmarks/README.md ("## bench transfer: the regression gate").

1. A baseline: `devctl bench transfer --quick --json`, as a CI job would record it.
2. N identical reruns (default 20): `devctl bench transfer --quick --baseline BASE`. Every exit 1 is a false
   alarm: nothing changed but the moment.
3. M reruns under a real slowdown (default 10): the same command while one competitor process per CPU,
   pinned to it, spins for DUTY (default 20%) of every 2 ms and sleeps the rest: a neighbour that takes a
   fifth of every CPU, so the benchmark gets about four fifths of the CPU time it had. Nothing in devctl
   knows about it; the transfers really run slower. Every exit 1 is a catch. Plain and slowed reruns
   alternate, so both see the same background load.

For each gated cell it prints the median change of its GB/s against the baseline in both kinds of rerun: the
slowdown the competitors really caused, next to the noise of identical reruns.

Usage: nice python benchmarks/bench_gate.py [--reruns 20] [--slowed 10] [--duty 0.2] [--max-regression 10%]
       [--keep DIR] [-- extra bench transfer flags]
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

ROOT = Path(__file__).resolve().parent.parent
PERIOD_S = 0.002  # the competitor's cycle: short against a 16M transfer (1-10 ms), so most transfers meet it

# One competitor: pinned to one CPU, busy for duty x PERIOD_S, asleep for the rest, until killed.
COMPETITOR = r"""
import os, sys, time
cpu, duty, period = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
os.sched_setaffinity(0, {cpu})
busy = duty * period
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < busy:
        pass
    time.sleep(period - busy)
"""


def devctl(*args: str) -> tuple[int, dict | None, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "devctl", "bench", "transfer", *args, "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = None
    return proc.returncode, doc, proc.stderr


class Competitors:
    """One competitor per CPU this process may use, for the length of a `with` block."""

    def __init__(self, duty: float):
        self.duty, self.procs = duty, []

    def __enter__(self) -> Competitors:
        for cpu in sorted(os.sched_getaffinity(0)):
            cmd = [sys.executable, "-c", COMPETITOR, str(cpu), str(self.duty), str(PERIOD_S)]
            self.procs.append(subprocess.Popen(cmd))
        time.sleep(0.2)  # running before the benchmark starts
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def gbps_by_cell(doc: dict) -> dict[tuple, float]:
    return {
        (c["direction"], c["variant"], c["layout"], c["size_bytes"], c["src"], c["dst"]): c["gbps"]
        for c in doc["results"]
        if c["gbps"] is not None
    }


def size(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}K"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reruns", type=int, default=20, help="identical reruns (false alarms are counted)")
    ap.add_argument("--slowed", type=int, default=10, help="reruns under the competitors (catches are counted)")
    ap.add_argument("--duty", type=float, default=0.2, help="share of every CPU the competitors take")
    ap.add_argument("--max-regression", default="10%")
    ap.add_argument("--keep", type=Path, help="keep every JSON document in this directory")
    ap.add_argument("extra", nargs="*", help="more bench transfer flags, for the baseline and every rerun")
    args = ap.parse_args()
    flags = ["--quick", *args.extra]
    out = args.keep or Path(tempfile.mkdtemp(prefix="devctl-gate-"))
    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    code, base, err = devctl(*flags)
    if code != 0 or base is None:
        sys.exit(f"baseline run failed (exit {code}): {err.strip()}")
    base_path = out / "baseline.json"
    base_path.write_text(json.dumps(base))
    gate_flags = [*flags, "--baseline", str(base_path), "--max-regression", args.max_regression]

    runs: dict[str, list[tuple[int, dict | None, str, float]]] = {"identical": [], "slowed": []}
    for i in range(max(args.reruns, args.slowed)):
        for kind, count in (("identical", args.reruns), ("slowed", args.slowed)):
            if i >= count:
                continue
            load = os.getloadavg()[0]
            if kind == "slowed":
                with Competitors(args.duty):
                    result = devctl(*gate_flags)
            else:
                result = devctl(*gate_flags)
            runs[kind].append((*result, load))
            if result[1] is not None:
                (out / f"{kind}-{i + 1:02d}.json").write_text(json.dumps(result[1]))
            print(f"{kind} {i + 1}: exit {result[0]}", file=sys.stderr, flush=True)

    base_gbps = gbps_by_cell(base)
    gated = next((doc["gate"] for _, doc, _, _ in runs["identical"] + runs["slowed"] if doc and doc.get("gate")), None)
    print(f"\nmachine: {os.cpu_count()} CPUs, {base['environment'].get('backend')} backend, jax {base['environment'].get('jax')}")
    print(f"baseline: devctl bench transfer {' '.join(flags)}; gate --max-regression {args.max_regression}")
    if gated:
        print(f"gated cells: {gated['gated']}, latency-bound not gated: {gated['latency_bound']}, one size: {gated['one_size']}")
    for kind, label in (("identical", "false alarms"), ("slowed", f"catches (competitors at {args.duty:.0%} of each CPU)")):
        rs = runs[kind]
        if not rs:
            continue
        ones = sum(1 for code, *_ in rs if code == 1)
        others = [code for code, *_ in rs if code not in (0, 1)]
        loads = [load for *_, load in rs]
        print(f"{kind} reruns: {label}: {ones}/{len(rs)}" + (f" (other exits: {others})" if others else ""))
        print(f"  1-minute load average at start: {min(loads):.1f} to {max(loads):.1f} (median {statistics.median(loads):.1f})")
        failed: dict[str, int] = {}
        for code, doc, _, _ in rs:
            for r in (doc or {}).get("gate", {}).get("regressions", []):
                name = f"{r['direction']} {size(r['size_bytes'])}"
                failed[name] = failed.get(name, 0) + 1
        if failed:
            print("  cells that failed: " + ", ".join(f"{k} x{v}" for k, v in sorted(failed.items())))
        changes: dict[tuple, list[float]] = {}
        for _, doc, _, _ in rs:
            for key, gbps in gbps_by_cell(doc or {"results": []}).items():
                if key in base_gbps:
                    changes.setdefault(key, []).append((gbps / base_gbps[key] - 1) * 100)
        for key, values in sorted(changes.items(), key=lambda kv: (kv[0][3], kv[0][0])):
            q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
            print(
                f"  {key[0]} {size(key[3])}: GB/s vs baseline, median {statistics.median(values):+.0f}% "
                f"(p10 {q[0]:+.0f}%, p90 {q[-1]:+.0f}%)"
            )
    print(f"\nwall time {time.monotonic() - started:.0f} s; documents in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
