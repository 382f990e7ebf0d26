"""Reports for the golden tables of `bench memory` and `bench matmul`: an 8-GPU H100 host with one slow GPU, and a
4-device CPU host after --quick. Built as a run builds them: probe events, assembled by the collector (which
sets each figure against its roof and names the stragglers). Nothing here reads the machine or imports jax."""

from __future__ import annotations

import math

from devctl.model import to_jsonable
from devctl.model.bench import BenchDevice

GIB, MIB = 1 << 30, 1 << 20
H100 = "NVIDIA H100 80GB HBM3"
BYTES_LIMIT = 63_771_852_390
ENV = {"python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.4.6", "backend": "cuda", "platform_version": None,
       "hostname": "dgx-h100-07", "cpu_count": 224, "cpu_affinity": None, "xla_flags": None, "jax_platforms": None,
       "repeats": 5, "min_time_s": 0.2, "warmups": 2, "quick": False, "burst_min_s": 0.02, "sweep_note": None}  # fmt: skip


def _stats(median: float, samples: int, overhead: float) -> dict:
    """A cell's statistics, per call of bursts calibrated to last 20 ms, and one call timed alone `overhead` slower."""
    calls = min(1000, max(2, math.ceil(0.02 / median)))
    return dict(samples=samples, calls_per_sample=calls, min_s=median * 0.98, p10_s=median * 0.99, median_s=median,
                p90_s=median * 1.03, max_s=median * 1.12, mean_s=median * 1.01, cv=0.02, single_call_s=median + overhead,
                call_overhead_s=overhead)  # fmt: skip


def _gpus() -> list[dict]:
    return [to_jsonable(BenchDevice(i, f"cuda:{i}", "gpu", H100, ("device", "pinned_host"), BYTES_LIMIT)) for i in range(8)]


def _cpus() -> list[dict]:
    return [to_jsonable(BenchDevice(i, f"cpu:{i}", "cpu", "cpu", ("device", "pinned_host", "unpinned_host"))) for i in range(4)]


def _events(devices: list[dict], cells: list[dict], env: dict) -> list[dict]:
    return [{"event": "plan", "devices": devices, "environment": env, "cells": len(cells)},
            *({"event": "cell", **c} for c in cells), {"event": "done", "elapsed_s": 41.2}]  # fmt: skip


def _memory_cell(device: str, size: int, gbps: float, roof: float | None, overhead: float) -> dict:
    median = 2 * size / (gbps * 1e9)
    return dict(device=device, size_bytes=size, bytes_moved=2 * size, **_stats(median, 5 if size >= GIB else 40, overhead), gbps=gbps,
                peak_gbps=gbps / 0.98, roof_gbps=roof, pct_of_roof=100 * gbps / roof if roof else None, verified=True)  # fmt: skip


def memory_gpu8():
    """8 H100s, cuda:5 reading at 78% of its siblings (a GPU whose HBM clocks were capped), the 4G size skipped on one."""
    from devctl.collect.bench_memory import assemble

    cells = []
    for i in range(8):
        best = 2905.0 - 7 * ((i * 5) % 4) if i != 5 else 2268.0
        for size, share in ((256 * MIB, 0.93), (GIB, 0.99), (4 * GIB, 1.0)):
            # One call timed alone pays JAX's launch and the host's sync, ~0.2 ms (0.18 ms on an H200).
            cells.append(_memory_cell(f"cuda:{i}", size, round(best * share, 1), 3350, 0.000_19 + 0.000_002 * i))
    cells[3 * 7 + 2] = dict(device="cuda:7", size_bytes=4 * GIB, skipped=True,
                            note="skipped: 4G (source and destination) needs about 8.0 GiB on cuda:7, 5.2 GiB free")  # fmt: skip
    return assemble(_events(_gpus(), cells, ENV), elapsed_s=43.9)


def memory_cpu_quick():
    """`--quick` on 4 forced CPU devices: no published roof, the devices compared with each other."""
    from devctl.collect.bench_memory import assemble

    env = {**ENV, "backend": "cpu", "hostname": "vm", "cpu_count": 2, "cpu_affinity": [0, 1], "repeats": 3, "min_time_s": 0.02,
           "warmups": 1, "quick": True, "xla_flags": "--xla_force_host_platform_device_count=4",
           "sweep_note": "--quick: one size; the default sweep is 64M, 256M, 1G"}  # fmt: skip
    cells = [_memory_cell(f"cpu:{i}", 256 * MIB, g, None, o) for i, (g, o) in enumerate(((25.3, 0.0), (25.4, 0.000_41), (24.6, 0.000_12), (25.6, 0.000_3)))]
    return assemble(_events(_cpus(), cells, env), elapsed_s=2.8)


def _matmul_cell(device: str, dtype: str, n: int, tflops: float, roof: float | None, overhead: float) -> dict:
    flops = 2 * n**3
    median = flops / (tflops * 1e12)
    return dict(device=device, dtype=dtype, n=n, precision="DEFAULT" if dtype == "bf16" else "HIGHEST", flops=flops,
                **_stats(median, 40, overhead), tflops=tflops, peak_tflops=tflops / 0.98, roof_tflops=roof,
                pct_of_roof=100 * tflops / roof if roof else None, verified=True)  # fmt: skip


def matmul_gpu8():
    """8 H100s in bf16 and f32; cuda:2 thermally throttled in bf16 (its f32, far from the tensor cores' limit, is not)."""
    from devctl.collect.bench_matmul import assemble

    cells = []
    for i in range(8):
        for n, share in ((2048, 0.62), (4096, 0.9), (8192, 1.0)):
            bf16 = (731.0 if i != 2 else 538.0) - 3 * (i % 3)
            cells.append(_matmul_cell(f"cuda:{i}", "bf16", n, round(bf16 * share, 1), 989.5, 0.000_2 + 0.000_003 * (i % 3)))
        for n, share in ((2048, 0.8), (4096, 0.97), (8192, 1.0)):
            cells.append(_matmul_cell(f"cuda:{i}", "f32", n, round((51.2 - 0.2 * (i % 4)) * share, 2), 67, 0.000_21))
    return assemble(_events(_gpus(), cells, ENV), elapsed_s=38.4)


def matmul_cpu_quick():
    """`--quick` on 4 forced CPU devices: no published roof; cpu:3's bf16 came out at half its siblings'."""
    from devctl.collect.bench_matmul import assemble

    env = {**ENV, "backend": "cpu", "hostname": "vm", "cpu_count": 2, "cpu_affinity": [0, 1], "repeats": 3, "min_time_s": 0.02,
           "warmups": 1, "quick": True, "xla_flags": "--xla_force_host_platform_device_count=4",
           "sweep_note": "--quick: one size; the default sweep is 512, 1024"}  # fmt: skip
    cells = []
    for i, (bf16, f32) in enumerate(((0.142, 0.17), (0.148, 0.176), (0.134, 0.151), (0.0695, 0.16))):
        cells += [_matmul_cell(f"cpu:{i}", "bf16", 512, bf16, None, 0.000_16), _matmul_cell(f"cpu:{i}", "f32", 512, f32, None, 0.000_3)]
    return assemble(_events(_cpus(), cells, env), elapsed_s=4.7)


def matmul_cpu1_quick():
    """`--quick` on one CPU device: its two figures, no peers, no method (that is --verbose)."""
    from devctl.collect.bench_matmul import assemble

    env = {**ENV, "backend": "cpu", "hostname": "vm", "cpu_count": 2, "cpu_affinity": [0, 1], "repeats": 3, "min_time_s": 0.02,
           "warmups": 1, "quick": True, "sweep_note": "--quick: one size; the default sweep is 512, 1024"}  # fmt: skip
    cells = [_matmul_cell("cpu:0", "bf16", 512, 0.142, None, 0.000_16), _matmul_cell("cpu:0", "f32", 512, 0.17, None, 0.000_3)]
    return assemble(_events(_cpus()[:1], cells, env), elapsed_s=2.1)


VIEWS = {
    "bench-memory-gpu8": memory_gpu8,
    "bench-memory-cpu-quick": memory_cpu_quick,
    "bench-matmul-gpu8": matmul_gpu8,
    "bench-matmul-cpu-quick": matmul_cpu_quick,
    "bench-matmul-cpu1-quick": matmul_cpu1_quick,
}
