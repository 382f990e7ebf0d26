"""Does `devctl bench transfer` measure what a bare JAX loop measures, and how long does it take?

Figures are recorded in benchmarks/README.md ("## bench transfer").

1. Fidelity, same process: for every direction at 16 MiB and 64 MiB, devctl's own
   measurement code (the probe child's `Bench._time` on the `Transfer` it builds)
   alternated, sample by sample, with a minimal hand-written loop of the same JAX
   call (`device_put(...).block_until_ready()`, or `np.asarray` of a fresh array
   for d2h). Same process, same heap, same moment: what differs is devctl's method.
   Target: medians within 10%.
2. Fidelity, end to end: `devctl bench transfer --json` and the hand loop, each in
   a fresh process, alternated. Noisier (each process starts with its own heap).
3. Wall time of `devctl bench transfer` (default) and `--quick`. Targets: < 30 s, < 8 s.
4. The fastest path per direction with every variant, at 64 MiB and 256 MiB, against host memcpy.

Usage: python benchmarks/bench_transfer_fidelity.py [--samples 31] [--e2e-rounds 3] [--skip-wall] [--skip-variants]
XLA_FLAGS=--xla_force_host_platform_device_count=4 is set if absent.
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
sys.path.insert(0, str(ROOT))
SIZES = (16 << 20, 64 << 20)
REPEATS = 15
WARMUPS = 2
DIRECTIONS = ("h2d", "d2h", "d2d", "d2d-self")

# The hand-written loops: nothing but the JAX call, timed with perf_counter around it.
HAND_LOOP = r"""
import json, sys, time
import numpy as np, jax

def hand_calls(size):
    devs = jax.devices()
    d0, d1 = devs[0], devs[min(1, len(devs) - 1)]  # devctl's default d2d pair is the first two devices
    x = np.ones(size, np.uint8)  # numpy's own allocation: 16 bytes into a page, so XLA copies it
    master = jax.device_put(x, d0, may_alias=False).block_until_ready()
    fresh = lambda: jax.device_put(master, d0, may_alias=False).block_until_ready()
    none = lambda: None
    calls = {
        "h2d": (none, lambda _: jax.device_put(x, d0).block_until_ready()),
        "d2h": (fresh, np.asarray),
        "d2h copy": (fresh, lambda a: np.array(a, copy=True)),
        "d2d-self": (none, lambda _: jax.device_put(master, d0, may_alias=False).block_until_ready()),
    }
    if d1 != d0:
        calls["d2d"] = (none, lambda _: jax.device_put(master, d1).block_until_ready())
    return calls

def hand_median(prepare, op, repeats, warmups):
    for _ in range(warmups):
        op(prepare())
    samples = []
    for _ in range(repeats):
        a = prepare()
        t0 = time.perf_counter()
        r = op(a)
        samples.append(time.perf_counter() - t0)
        del r, a
    return sorted(samples)[len(samples) // 2]

if __name__ == "__main__":
    size, repeats, warmups = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps({k: hand_median(p, o, repeats, warmups) for k, (p, o) in hand_calls(size).items()}))
"""


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e.setdefault("NO_COLOR", "1")
    return e


def devctl(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "devctl", "bench", "transfer", *args]
    proc = subprocess.run(cmd, env=env(), capture_output=True, text=True)
    return proc, time.perf_counter() - t0


def devctl_medians(size: int) -> dict[str, float]:
    proc, _ = devctl(
        "--sizes", str(size), "--repeats", str(REPEATS), "--min-time", "0", "--warmups", str(WARMUPS), "--json"
    )
    if proc.returncode != 0:
        sys.exit(f"devctl failed: {proc.stderr}")
    medians: dict[str, float] = {}
    for c in json.loads(proc.stdout)["results"]:
        medians.setdefault(c["direction"], c["median_s"])  # the first d2d pair is the swept one (0 -> 1)
    return medians


def hand_medians(size: int) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", HAND_LOOP, str(size), str(REPEATS), str(WARMUPS)],
        env=env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"hand loop failed: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fidelity_in_process(samples: int) -> None:
    """devctl's measurement code and the hand loop, alternated sample by sample in this one process.

    On a shared 2-core machine the noise moves on a scale of seconds; alternating single
    samples lets it hit both sides alike, so what remains is the difference in method.
    """
    import jax
    import numpy as np

    from devctl.model.bench_transfer import TransferOptions
    from devctl.probe.bench_transfer import Bench, HostBuffers, Spec

    hand: dict = {"__name__": "hand_loop"}
    exec(compile(HAND_LOOP, "hand_loop", "exec"), hand)
    # One timed sample per call of devctl's timing loop; warm-ups are done once, below.
    bench = Bench(TransferOptions(repeats=1, min_time_s=0.0, warmups=0, verify=False), jax, np)
    bench.resolve()
    devs = jax.devices()
    d0, d1 = devs[0], devs[min(1, len(devs) - 1)]
    print(f"## Fidelity, same process: medians of {samples} samples each, devctl and hand loop alternated")
    print(f"{'direction':9} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  devctl p10-p90 | hand p10-p90")
    for size in SIZES:
        host = HostBuffers(np, size)
        calls = hand["hand_calls"](size)
        specs = {
            "h2d": Spec("h2d", "pageable", "single", size, None, d0),
            "d2h": Spec("d2h", "numpy", "single", size, d0, None),
            "d2h copy": Spec("d2h", "copy", "single", size, d0, None),
            "d2d-self": Spec("d2d-self", "put", "single", size, d0, d0),
        }
        if d1 != d0:
            specs["d2d"] = Spec("d2d", "put", "single", size, d0, d1)
        for d, spec in specs.items():
            t = bench._transfer(spec, host)
            prepare, op = calls[d]
            for _ in range(WARMUPS):
                t.op(t.prepare())
                op(prepare())
            ours, theirs = [], []
            for _ in range(samples):
                ours.append(bench._time(t, limit=0, warmed=True)[0]["median_s"])  # call by call, one sample
                theirs.append(hand["hand_median"](prepare, op, 1, 0))
            del t
            report_row(d, size, ours, theirs, spread=True)
        del host, calls


def fidelity_end_to_end(rounds: int) -> None:
    print(f"\n## Fidelity, end to end: devctl CLI vs hand loop, fresh processes, {rounds} alternated rounds")
    print(f"{'direction':9} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  per-round ratios")
    for size in SIZES:
        ours: dict[str, list[float]] = {d: [] for d in DIRECTIONS}
        theirs: dict[str, list[float]] = {d: [] for d in DIRECTIONS}
        for _ in range(rounds):
            for d, v in devctl_medians(size).items():
                ours[d].append(v)
            for d, v in hand_medians(size).items():
                if d in theirs:
                    theirs[d].append(v)
        for d in DIRECTIONS:
            if ours[d] and theirs[d]:
                report_row(d, size, ours[d], theirs[d])


def report_row(direction: str, size: int, ours: list[float], theirs: list[float], spread: bool = False) -> None:
    a, b = statistics.median(ours), statistics.median(theirs)
    if spread:
        detail = f"{p_range(ours)} | {p_range(theirs)}"
    else:
        detail = " ".join(f"{x / y:.2f}" for x, y in zip(ours, theirs))
    print(f"{direction:9} {size >> 20:>4}M {fmt_s(a):>10} {fmt_s(b):>10} {a / b:>6.2f}  {detail}", flush=True)


def p_range(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{fmt_s(q[0])}-{fmt_s(q[-1])}"


def wall_times(default_runs: int, quick_runs: int) -> None:
    print("\n## Wall time of the whole command (includes Python and JAX start-up)")
    for label, args, runs in (("default", (), default_runs), ("--quick", ("--quick",), quick_runs)):
        times = []
        for _ in range(runs):
            proc, t = devctl(*args, "--json")
            if proc.returncode != 0:
                sys.exit(f"devctl {label} failed: {proc.stderr}")
            times.append(t)
        print(f"{label:9} runs: {', '.join(f'{t:.1f}' for t in times)} s; max {max(times):.1f} s")


def variants() -> None:
    print("\n## Every variant at 64M and 256M (GB/s; zero-copy = aliased, no bandwidth)")
    proc, t = devctl("--variants", "all", "--sizes", "64M,256M", "--json")
    if proc.returncode != 0:
        sys.exit(f"devctl failed: {proc.stderr}")
    doc = json.loads(proc.stdout)
    memcpy = {r["size_bytes"]: r["gbps"] for r in doc["roofs"]["host_memcpy"]}
    for size, g in memcpy.items():
        print(f"host memcpy (warm) {size >> 20}M: {g:.2f} GB/s")
    for c in doc["results"]:
        if (c["src"], c["dst"]) not in (("cpu:0", "cpu:1"), ("host", "cpu:0"), ("cpu:0", "host"), ("cpu:0", "cpu:0")):
            continue
        value = "zero-copy" if c["zero_copy"] else f"{c['gbps']:.2f} GB/s ({c['pct_of_roof']:.0f}% of memcpy)"
        print(f"{c['direction']:9} {c['variant']:9} {c['size_bytes'] >> 20:>4}M  {value}")
    for f in doc["fastest"]:
        best = f"{f['variant']} {f['gbps']:.2f} GB/s, {f['pct_of_roof']:.0f}% of memcpy" if f["variant"] else f["note"]
        print(f"fastest {f['direction']} at {f['size_bytes'] >> 20}M: {best}")
    print(f"(run took {t:.1f} s)")


def fmt_s(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=31)
    p.add_argument("--e2e-rounds", type=int, default=3)
    p.add_argument("--default-runs", type=int, default=2)
    p.add_argument("--quick-runs", type=int, default=3)
    p.add_argument("--skip-wall", action="store_true")
    p.add_argument("--skip-variants", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("XLA_FLAGS", env()["XLA_FLAGS"])
    # The probe's progress events would go to stdout outside a devctl child: send them nowhere.
    from devctl.probe.channel import FD_ENV

    os.environ[FD_ENV] = str(os.open(os.devnull, os.O_WRONLY))
    print(f"# {os.cpu_count()} CPUs, XLA_FLAGS={os.environ['XLA_FLAGS']}")
    fidelity_in_process(a.samples)
    fidelity_end_to_end(a.e2e_rounds)
    if not a.skip_wall:
        wall_times(a.default_runs, a.quick_runs)
    if not a.skip_variants:
        variants()


if __name__ == "__main__":
    main()
