"""Does `devctl bench collective` measure what a bare JAX loop measures, and how long does it take?

Figures are recorded in benchmarks/README.md ("## bench collective").

1. Fidelity, same process: for every collective at 16 MiB and 64 MiB per device on 4 forced CPU devices,
   devctl's own measurement code (the probe child's compiled cell and `Bench._time`) alternated, sample by
   sample, with a minimal hand-written loop of the same jitted JAX collective
   (`jax.jit(shard_map(lax.psum ...))(x).block_until_ready()`). Same process, same moment: what differs is
   devctl's method. Target: medians within 10%.
2. Fidelity, end to end: `devctl bench collective --json` and the hand loop, each in a fresh process, alternated.
3. Fidelity across 2 processes (gloo on 127.0.0.1, 2 devices each), on the axis across processes: devctl's
   measurement code and the hand loop alternated sample by sample in 2 joined processes; then (unless
   --skip-e2e) `devctl bench collective --distributed` against the hand loop run by 2 fresh processes.
4. Wall time of `devctl bench collective` (default) and `--quick` on 4 CPU devices. Targets: < 60 s, < 15 s.

Usage: python benchmarks/bench_collective_fidelity.py [--samples 15] [--e2e-rounds 3] [--skip-e2e] [--skip-cluster] [--skip-wall]
XLA_FLAGS=--xla_force_host_platform_device_count=4 is set if absent.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SIZES = (16 << 20, 64 << 20)
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ppermute")
REPEATS = 9
WARMUPS = 2

# The hand-written loop: the collective in shard_map, jitted, called and waited for; nothing else.
HAND_LOOP = r"""
import json, sys, time
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map

def hand_calls(size, axes):
    devs = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    names = tuple(a for a, _ in axes)
    mesh = Mesh(np.array(devs, dtype=object).reshape([s for _, s in axes]), names)
    spec = P(names)
    axis, n = axes[0]
    ring = [(i, (i + 1) % n) for i in range(n)]
    bodies = {
        "all-reduce": (size, lambda x: jax.lax.psum(x, axis)),
        "all-gather": (size // n, lambda x: jax.lax.all_gather(x, axis, tiled=True)),
        "reduce-scatter": (size, lambda x: jax.lax.psum_scatter(x, axis, tiled=True)),
        "all-to-all": (size, lambda x: jax.lax.all_to_all(x, axis, 0, 0, tiled=True)),
        "ppermute": (size, lambda x: jax.lax.ppermute(x, axis, ring)),
    }
    calls = {}
    for name, (in_bytes, body) in bodies.items():
        total = in_bytes // 4 * len(devs)
        x = jax.jit(lambda: jnp.ones((total,), jnp.float32), out_shardings=NamedSharding(mesh, spec))()
        f = jax.jit(shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
        calls[name] = (f, x)
    return calls

def hand_sample(f, x, calls=1):
    # Seconds per call of `calls` calls dispatched back to back and one block_until_ready: a hand-written burst.
    t0 = time.perf_counter()
    out = None
    for _ in range(calls):
        out = f(x)
    out.block_until_ready()
    return (time.perf_counter() - t0) / calls

def hand_median(f, x, repeats, warmups):
    for _ in range(warmups):
        f(x).block_until_ready()
    return sorted(hand_sample(f, x) for _ in range(repeats))[repeats // 2]

if __name__ == "__main__":
    size, repeats, warmups = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:  # across processes: coordinator, process count, process id
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
        n = int(sys.argv[5])
        axes = (("hosts", n), ("local", len(jax.devices()) // n))
    else:
        axes = (("devices", len(jax.devices())),)
    out = {}
    for name, (f, x) in hand_calls(size, axes).items():
        out[name] = hand_median(f, x, repeats, warmups)
        del f, x
    if jax.process_index() == 0:
        print(json.dumps(out))
    sys.stdout.flush()
    import os
    os._exit(0)
"""


def env(devices: int = 4) -> dict[str, str]:
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["JAX_PLATFORMS"] = "cpu"
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e.setdefault("NO_COLOR", "1")
    return e


def devctl(*args: str, devices: int = 4) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "devctl", "bench", "collective", *args]
    proc = subprocess.run(cmd, env=env(devices), capture_output=True, text=True)
    return proc, time.perf_counter() - t0


def fixed(size: int) -> tuple[str, ...]:
    # A fixed number of samples, as the hand loop takes: --budget 0 leaves --repeats alone.
    return ("--sizes", str(size), "--repeats", str(REPEATS), "--warmups", str(WARMUPS), "--budget", "0", "--json")


def devctl_medians(size: int) -> dict[str, float]:
    proc, _ = devctl(*fixed(size))
    if proc.returncode != 0:
        sys.exit(f"devctl failed: {proc.stderr}")
    return {c["collective"]: c["median_s"] for c in json.loads(proc.stdout)["results"]}


def hand_medians(size: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", HAND_LOOP, str(size), str(REPEATS), str(WARMUPS)], env=env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"hand loop failed: {proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# devctl chains these (each call takes the one before's output): the same shape in and out.
CHAINED = ("all-reduce", "all-to-all", "ppermute")


def fidelity_in_process(samples: int) -> None:
    """devctl's compiled cell and timing loop and the hand loop, alternated sample by sample in this process."""
    import jax
    import numpy as np

    from devctl.model.bench_collective import CollectiveOptions
    from devctl.probe.bench_collective import Agreement, Bench
    from devctl.probe.bench_collective_ops import compiled_collective, elements, make_input

    # The probe's progress events (tick) go to a pipe in a real run; here, nowhere.
    os.environ.setdefault("DEVCTL_PROBE_FD", str(os.open(os.devnull, os.O_WRONLY)))
    hand: dict = {"__name__": "hand_loop"}
    exec(compile(HAND_LOOP, "hand_loop", "exec"), hand)
    bench = Bench(CollectiveOptions(repeats=1, warmups=0, budget_s=0.0), jax, np, Agreement())
    bench.resolve()
    axis = bench.axes[0]
    print(f"## Fidelity, same process: medians of {samples} samples each, devctl and hand loop alternated")
    print(f"{'collective':14} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  devctl p10-p90 | hand p10-p90")
    for size in SIZES:
        calls = hand["hand_calls"](size, ((axis.name, axis.size),))
        for name in COLLECTIVES:
            local, _ = elements(name, size, axis.size, 4)
            x = make_input(jax, bench.layout, local, "float32")
            compiled = compiled_collective(jax, bench.layout, name, axis.name, axis.size, x)
            f, hx = calls[name]
            for _ in range(WARMUPS):
                compiled(x).block_until_ready()
                f(hx).block_until_ready()
            ours, theirs = [], []
            for _ in range(samples):
                # devctl's cell as it times a bandwidth cell (a calibrated burst), the hand loop a burst as long.
                st = bench._time(compiled, x, burst=True, out_bytes=size, chain=name in CHAINED)
                ours.append(st["median_s"])
                theirs.append(hand["hand_sample"](f, hx, st["calls_per_sample"]))
            del x, compiled, f, hx
            report_row(name, size, ours, theirs, spread=True)
        del calls


def fidelity_end_to_end(rounds: int) -> None:
    print(f"\n## Fidelity, end to end: devctl CLI vs hand loop, fresh processes, {rounds} alternated rounds")
    print(f"{'collective':14} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  per-round ratios")
    for size in SIZES:
        ours: dict[str, list[float]] = {c: [] for c in COLLECTIVES}
        theirs: dict[str, list[float]] = {c: [] for c in COLLECTIVES}
        for _ in range(rounds):
            for c, v in devctl_medians(size).items():
                ours[c].append(v)
            for c, v in hand_medians(size).items():
                theirs[c].append(v)
        for c in COLLECTIVES:
            report_row(c, size, ours[c], theirs[c])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fidelity_cluster(rounds: int) -> None:
    """2 processes of 2 devices each: devctl --distributed's axis across processes against the hand loop's."""
    print(f"\n## Fidelity across 2 processes (gloo, 127.0.0.1, 2 devices each), axis `hosts`, {rounds} alternated rounds")
    print(f"{'collective':14} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  per-round ratios")
    for size in SIZES:
        ours: dict[str, list[float]] = {c: [] for c in COLLECTIVES}
        theirs: dict[str, list[float]] = {c: [] for c in COLLECTIVES}
        for _ in range(rounds):
            port = _free_port()
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "devctl", "bench", "collective", *fixed(size), "--distributed", "--coordinator",
                     f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i), "--timeout", "60"],
                    env=env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                )
                for i in range(2)
            ]  # fmt: skip
            out = [p.communicate(timeout=600) for p in procs]
            if procs[0].returncode != 0:
                sys.exit(f"devctl --distributed failed: {out[0][1]}")
            for c in json.loads(out[0][0])["results"]:
                if c["axis"] == "hosts":
                    ours[c["collective"]].append(c["median_s"])
            port = _free_port()
            procs = [
                subprocess.Popen([sys.executable, "-c", HAND_LOOP, str(size), str(REPEATS), str(WARMUPS), f"127.0.0.1:{port}", "2", str(i)],
                                 env=env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)
            ]  # fmt: skip
            out = [p.communicate(timeout=600) for p in procs]
            for c, v in json.loads(out[0][0].strip().splitlines()[-1]).items():
                theirs[c].append(v)
        for c in COLLECTIVES:
            if ours[c] and theirs[c]:
                report_row(c, size, ours[c], theirs[c])


# Each of 2 processes: join, then devctl's compiled cell and timing loop and the hand loop alternated sample by
# sample on the axis across processes; process 0 prints both sample lists.
CLUSTER_ALTERNATE = r"""
import json, os, sys
os.environ.setdefault("DEVCTL_PROBE_FD", str(os.open(os.devnull, os.O_WRONLY)))
import numpy as np, jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(sys.argv[1], 2, int(sys.argv[2]))
from devctl.model.bench_collective import CollectiveOptions
from devctl.probe.bench_collective import Agreement, Bench
from devctl.probe.bench_collective_ops import compiled_collective, elements, make_input
hand = {"__name__": "hand_loop"}
exec(compile(HAND_LOOP, "hand_loop", "exec"), hand)
size, samples, warmups = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
from jax._src import distributed
state = distributed.global_state
# Every choice devctl's timing makes (a burst's length, when to stop) is process 0's, as in the probe child.
bench = Bench(CollectiveOptions(repeats=1, warmups=0, budget_s=0.0), jax, np, Agreement(state.client, state.process_id, 2, 60.0))
bench.resolve()
axis = next(a for a in bench.axes if a.name == "hosts")
calls = hand["hand_calls"](size, (("hosts", 2), ("local", len(jax.devices()) // 2)))
out = {}
for name, (f, hx) in calls.items():
    local, _ = elements(name, size, axis.size, 4)
    x = make_input(jax, bench.layout, local, "float32")
    compiled = compiled_collective(jax, bench.layout, name, axis.name, axis.size, x)
    for _ in range(warmups):
        compiled(x).block_until_ready()
        f(hx).block_until_ready()
    ours, theirs = [], []
    for _ in range(samples):
        st = bench._time(compiled, x, burst=True, out_bytes=size, chain=name in ("all-reduce", "all-to-all", "ppermute"))
        ours.append(st["median_s"])
        theirs.append(hand["hand_sample"](f, hx, st["calls_per_sample"]))
    out[name] = [ours, theirs]
    del x, compiled
if jax.process_index() == 0:
    print(json.dumps(out))
sys.stdout.flush()
os._exit(0)
"""


def fidelity_cluster_in_process(samples: int) -> None:
    print(f"\n## Fidelity across 2 processes, same processes: medians of {samples} samples each, alternated, axis `hosts`")
    print(f"{'collective':14} {'size':>5} {'devctl':>10} {'hand':>10} {'ratio':>6}  devctl p10-p90 | hand p10-p90")
    script = "HAND_LOOP = " + repr(HAND_LOOP) + "\n" + CLUSTER_ALTERNATE
    for size in SIZES:
        port = _free_port()
        procs = [
            subprocess.Popen([sys.executable, "-c", script, f"127.0.0.1:{port}", str(i), str(size), str(samples), str(WARMUPS)],
                             env=env(2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for i in range(2)
        ]  # fmt: skip
        out = [p.communicate(timeout=900) for p in procs]
        if procs[0].returncode != 0:
            sys.exit(f"cluster alternation failed: {out[0][1][-2000:]}")
        for name, (ours, theirs) in json.loads(out[0][0].strip().splitlines()[-1]).items():
            report_row(name, size, ours, theirs, spread=True)


def report_row(name: str, size: int, ours: list[float], theirs: list[float], spread: bool = False) -> None:
    a, b = statistics.median(ours), statistics.median(theirs)
    if spread:
        detail = f"{p_range(ours)} | {p_range(theirs)}"
    else:
        detail = " ".join(f"{x / y:.2f}" for x, y in zip(ours, theirs))
    print(f"{name:14} {size >> 20:>4}M {fmt_s(a):>10} {fmt_s(b):>10} {a / b:>6.2f}  {detail}", flush=True)


def p_range(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{fmt_s(q[0])}-{fmt_s(q[-1])}"


def fmt_s(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def wall_times(runs: int) -> None:
    print("\n## Wall time of the whole command on 4 CPU devices (includes Python and JAX start-up)")
    for label, args in (("default", ()), ("--quick", ("--quick",))):
        times = []
        for _ in range(runs):
            proc, t = devctl(*args, "--json")
            if proc.returncode != 0:
                sys.exit(f"devctl failed: {proc.stderr}")
            times.append(t)
        print(f"{label:8} median {statistics.median(times):.1f} s  (runs: {', '.join(f'{t:.1f}' for t in times)})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--e2e-rounds", type=int, default=3)
    p.add_argument("--wall-runs", type=int, default=3)
    p.add_argument("--skip-e2e", action="store_true")
    p.add_argument("--skip-cluster", action="store_true")
    p.add_argument("--skip-wall", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    fidelity_in_process(args.samples)
    if not args.skip_e2e:
        fidelity_end_to_end(args.e2e_rounds)
    if not args.skip_cluster:
        fidelity_cluster_in_process(args.samples)
        if not args.skip_e2e:
            fidelity_cluster(args.e2e_rounds)
    if not args.skip_wall:
        wall_times(args.wall_runs)


if __name__ == "__main__":
    main()
