"""Does the regression gate of `devctl bench transfer` stay quiet on identical reruns and catch a real slowdown?

Figures are recorded in benchmarks/README.md ("## bench transfer: the regression gate").

1. A baseline: K runs of `devctl bench transfer --quick --json` (default 3), as a CI job would record it, pooled
   by giving --baseline once per run.
2. N identical reruns (default 20): `devctl bench transfer --quick --baseline B1 --baseline B2 ...`. Every exit 1
   is a false alarm: nothing changed but the moment.
3. M reruns under a real slowdown (default 10), one of two kinds (--slowdown):
   - quota (default; needs root and cgroup v1's cpu controller): the rerun runs in its own cgroup whose CPU
     time is capped at SHARE (default 0.8) of one CPU per period of 10 ms. The kernel stops the benchmark's
     threads for the rest of each period: its transfers really take longer, steadily, as on a smaller or
     oversubscribed machine.
   - competitors: one process per CPU, pinned to it, spins for DUTY (default 20%) of every 2 ms and sleeps the
     rest: a neighbour that takes a fifth of every CPU. Noisier: a 64M transfer meets it or not.
   Nothing in devctl knows about either; every exit 1 is a catch. Plain and slowed reruns alternate, so both see
   the same background load.

For each gated cell it prints the median change of its GB/s against the baseline in both kinds of rerun: the
slowdown the competitors really caused, next to the noise of identical reruns.

Usage: python benchmarks/bench_gate.py [--baseline-runs 3] [--reruns 20] [--slowed 10] [--slowdown quota|competitors]
       [--share 0.8] [--duty 0.2] [--max-regression 10%] [--keep DIR] [-- extra bench transfer flags]
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


def devctl(*args: str, prefix: tuple[str, ...] = ()) -> tuple[int, dict | None, str]:
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "devctl", "bench", "transfer", *args, "--json"],
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


class Quota:
    """A cgroup v1 cpu group capped at `share` of one CPU per 10 ms period, for the length of a `with` block;
    `prefix` starts a command inside it."""

    ROOT = Path("/sys/fs/cgroup/cpu")
    PERIOD_US = 10_000

    def __init__(self, share: float):
        self.share = share
        self.path = self.ROOT / f"devctl-gate-{os.getpid()}"
        self.prefix = ("sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh")

    def __enter__(self) -> Quota:
        if not (self.ROOT / "cpu.cfs_quota_us").exists():
            sys.exit("--slowdown quota needs cgroup v1's cpu controller at /sys/fs/cgroup/cpu (and root)")
        self.path.mkdir()
        (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
        (self.path / "cpu.cfs_quota_us").write_text(str(round(self.share * self.PERIOD_US)))
        return self

    def __exit__(self, *exc) -> None:
        self.path.rmdir()  # every process in it has exited: subprocess.run waited for it


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
    ap.add_argument("--baseline-runs", type=int, default=3, help="runs pooled into the baseline")
    ap.add_argument("--reruns", type=int, default=20, help="identical reruns (false alarms are counted)")
    ap.add_argument("--slowed", type=int, default=10, help="reruns under a slowdown (catches are counted)")
    ap.add_argument("--slowdown", choices=("quota", "competitors"), default="quota")
    ap.add_argument("--share", type=float, default=0.8, help="quota: the share of one CPU a slowed rerun gets")
    ap.add_argument("--duty", type=float, default=0.2, help="competitors: the share of every CPU they take")
    ap.add_argument("--max-regression", default="10%")
    ap.add_argument("--keep", type=Path, help="keep every JSON document in this directory")
    ap.add_argument("extra", nargs="*", help="more bench transfer flags, for the baseline and every rerun")
    args = ap.parse_args()
    flags = ["--quick", *args.extra]
    out = args.keep or Path(tempfile.mkdtemp(prefix="devctl-gate-"))
    out.mkdir(parents=True, exist_ok=True)

    started = time.monotonic()
    gate_flags = [*flags, "--max-regression", args.max_regression]
    bases = []
    for k in range(args.baseline_runs):
        code, base, err = devctl(*flags)
        if code != 0 or base is None:
            sys.exit(f"baseline run failed (exit {code}): {err.strip()}")
        base_path = out / f"baseline-{k + 1}.json"
        base_path.write_text(json.dumps(base))
        bases.append(gbps_by_cell(base))
        gate_flags += ["--baseline", str(base_path)]

    runs: dict[str, list[tuple[int, dict | None, str, float]]] = {"identical": [], "slowed": []}
    for i in range(max(args.reruns, args.slowed)):
        for kind, count in (("identical", args.reruns), ("slowed", args.slowed)):
            if i >= count:
                continue
            load = os.getloadavg()[0]
            if kind == "slowed" and args.slowdown == "quota":
                with Quota(args.share) as quota:
                    result = devctl(*gate_flags, prefix=quota.prefix)
            elif kind == "slowed":
                with Competitors(args.duty):
                    result = devctl(*gate_flags)
            else:
                result = devctl(*gate_flags)
            runs[kind].append((*result, load))
            if result[1] is not None:
                (out / f"{kind}-{i + 1:02d}.json").write_text(json.dumps(result[1]))
            print(f"{kind} {i + 1}: exit {result[0]}", file=sys.stderr, flush=True)

    # What "GB/s vs baseline" below compares with: per cell, the median of the baseline runs (as the gate pools them).
    base_gbps = {key: statistics.median(b[key] for b in bases if key in b) for key in bases[-1]}
    gated = next((doc["gate"] for _, doc, _, _ in runs["identical"] + runs["slowed"] if doc and doc.get("gate")), None)
    print(f"\nmachine: {os.cpu_count()} CPUs, {base['environment'].get('backend')} backend, jax {base['environment'].get('jax')}")
    print(f"baseline: {args.baseline_runs} runs of devctl bench transfer {' '.join(flags)}, pooled; gate --max-regression {args.max_regression}")
    if gated:
        print(f"gated cells: {gated['gated']}, left out: {gated['left_out']}")
    slowdown = f"a CPU quota of {args.share:g} CPU" if args.slowdown == "quota" else f"competitors at {args.duty:.0%} of each CPU"
    for kind, label in (("identical", "false alarms"), ("slowed", f"catches ({slowdown})")):
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
                name = r["cell"]
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
