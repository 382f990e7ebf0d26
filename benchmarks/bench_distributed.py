"""Issue 6 scale goal: `devctl list --distributed --json` across 2 and 4 processes on 127.0.0.1 vs one `devctl list --json`.

    python benchmarks/bench_distributed.py [--runs N] [--devices D]

"1 process" is the distributed path alone (join, probe after joining, exchange)
with nobody to wait for: its extra time over `devctl list` is what each host
pays on a real cluster, plus waiting for the slowest host. Every process of a
cluster is started at once (as srun or gcloud --worker=all
would) and the wall time is process 0's, from the launch to its exit, which
includes waiting for the slowest process to join and report. Runs are
interleaved so machine noise hits every configuration alike. Target: the
4-process median exceeds the single-process median by less than 2 s.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# Bytecode as an installed devctl has it: `pip install` compiles every module once, while an
# editable checkout under PYTHONDONTWRITEBYTECODE recompiles ~100 modules in every process.
PYCACHE = tempfile.mkdtemp(prefix="devctl-bench-pycache-")
atexit.register(shutil.rmtree, PYCACHE, ignore_errors=True)


def env(devices: int) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("PYTHONDONTWRITEBYTECODE", None)
    e["PYTHONPYCACHEPREFIX"] = PYCACHE
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), e.get("PYTHONPATH")) if p)
    e.pop("JAX_PLATFORMS", None)
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s() -> float:
    """CPU seconds of every finished descendant (devctl and its probe children)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def single(devices: int) -> tuple[float, float]:
    c0, t0 = cpu_s(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "devctl", "list", "--json"], env=env(devices), stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, cpu_s() - c0


def cluster(n: int, devices: int) -> tuple[float, float, float, float]:
    """(process 0's wall time, CPU seconds of all processes, process 0's join wait, its gather wait)."""
    port = free_port()
    c0, t0 = cpu_s(), time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "devctl", "list", "--json", "--distributed", "--coordinator", f"127.0.0.1:{port}",
             "--num-processes", str(n), "--process-id", str(i), "--timeout", "60"],
            env=env(devices), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(n)
    ]  # fmt: skip
    out0, err0 = procs[0].communicate()
    elapsed = time.perf_counter() - t0
    for p in procs[1:]:
        p.communicate()
    if procs[0].returncode != 0:
        raise SystemExit(f"{n} processes: exit {procs[0].returncode}: {err0.strip()}")
    cpu = cpu_s() - c0
    doc = json.loads(out0)
    # Honest only if process 0 really listed every device of every process.
    assert len(doc["devices"]) == n * devices and {d["process_index"] for d in doc["devices"]} == set(range(n)), doc["devices"]
    return elapsed, cpu, doc["join_s"], doc["gather_s"]


def summary(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    return f"{name}: median {statistics.median(s):.2f} s (min {s[0]:.2f}, max {s[-1]:.2f}, n={len(s)})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--devices", type=int, default=4, help="forced CPU devices per process")
    args = ap.parse_args()
    single(args.devices)  # warm the page cache and .pyc files
    load = os.getloadavg()[0]
    names = ("single", "1 process", "2 processes", "4 processes")
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    waits: dict[str, list[tuple[float, float]]] = {k: [] for k in names[1:]}
    for _ in range(args.runs):
        w, c = single(args.devices)
        wall["single"].append(w)
        cpu["single"].append(c)
        for n in (1, 2, 4):
            w, c, join_s, gather_s = cluster(n, args.devices)
            name = f"{n} process" + ("es" if n > 1 else "")
            wall[name].append(w)
            cpu[name].append(c)
            waits[name].append((join_s, gather_s))
    cores = os.cpu_count() or 1
    print(f"{cores} CPU cores, load average {load:.1f} before / {os.getloadavg()[0]:.1f} after, {args.devices} CPU devices per process")
    for name in names:
        line = summary(name, wall[name]) + f"; CPU {statistics.median(cpu[name]):.2f} s in all"
        if name in waits:
            line += (
                f"; process 0 waited {statistics.median(j for j, _ in waits[name]):.2f} s to join,"
                f" {statistics.median(g for _, g in waits[name]):.3f} s to gather"
            )
        print(line)
    base = statistics.median(wall["single"])
    for name in names[1:]:
        extra = statistics.median(wall[name]) - base
        # Every process imports jax: on one machine they share its cores, on a cluster each has its own host.
        # The cluster cannot finish before its CPU work does, spread over every core.
        floor = statistics.median(cpu[name]) / cores
        print(f"extra wall time, {name}: {extra:+.2f} s; CPU-bound floor of the whole run on {cores} cores: {floor:.2f} s"
              + ("  (target: extra < 2 s)" if name.startswith("4") else ""))


if __name__ == "__main__":
    main()
