"""Reports for the golden tables of `devctl bench collective` (registered in golden_reports.VIEWS).

An 8 x H100 SXM host (NVLink through NVSwitch, figures of the size nccl-tests prints there, one slow link in
the --all-pairs matrix) and the forced 4-CPU-device host of this repository's tests, --quick. Built through the
collector's own assembly, so roofs and stragglers are computed as a real run computes them.
"""

from __future__ import annotations

from devctl.model import to_jsonable
from devctl.model.bench import BenchDevice
from devctl.model.bench_collective import LATENCY_MAX_BYTES, CollectiveCell, MeshAxis, bandwidths

KIB, MIB = 1 << 10, 1 << 20
H100 = "NVIDIA H100 80GB HBM3"


def _cell(collective, axis, n, size, median_s, samples=20, **kw) -> CollectiveCell:
    alg, bus = bandwidths("ppermute" if collective == "ppermute-pair" else collective, size, n, median_s)
    # As the child times them: a latency cell call by call, a bandwidth cell in bursts, its launch + sync apart.
    burst = size > LATENCY_MAX_BYTES
    timing = {"method": "burst", "calls_per_sample": max(2, round(0.02 / median_s)), "single_call_s": median_s + 18e-6,
              "call_overhead_s": 18e-6} if burst else {"method": "single", "calls_per_sample": 1}  # fmt: skip
    return CollectiveCell(
        **timing, collective=collective, axis=axis, ranks=n, size_bytes=size, dtype=kw.pop("dtype", "float32"), samples=samples,
        min_s=median_s * 0.97, p10_s=median_s * 0.98, median_s=median_s, p90_s=median_s * 1.04, max_s=median_s * 1.2,
        mean_s=median_s * 1.01, cv=0.03, algbw_gbps=alg, busbw_gbps=bus, compile_s=0.12, **kw,
    )  # fmt: skip


def _events(devices, axes, cells, environment, sweep_note=None) -> list[dict]:
    return [
        {"event": "plan", "devices": [to_jsonable(d) for d in devices], "axes": [to_jsonable(a) for a in axes], "environment": environment},
        *({"event": "cell", **to_jsonable(c)} for c in cells),
        {"event": "done", "sweep_note": sweep_note, "elapsed_s": 21.4},
    ]


def _env(kind: str, backend: str, n: int, quick: bool) -> dict:
    return {
        "python": "3.11.9", "jax": "0.10.2", "jaxlib": "0.10.2", "numpy": "2.2.6", "backend": backend,
        "platform_version": "cuda 13000" if backend == "cuda" else "cpu", "hostname": "node-a", "cpu_count": 2, "cpu_affinity": [0, 1],
        "xla_flags": None if backend == "cuda" else f"--xla_force_host_platform_device_count={n}", "jax_platforms": None, "shard_map": "jax.shard_map",
        "device_kind": kind, "process_count": 1, "process_index": 0, "repeats": 3 if quick else 5, "warmups": 1 if quick else 2,
        "budget_s": 0.05 if quick else 0.2, "quick": quick, "axes_note": None,
    }  # fmt: skip


def collective_gpu8():
    from devctl.collect.bench_collective import assemble

    devices = [BenchDevice(i, f"cuda:{i}", "gpu", H100, ("device", "pinned_host"), 63_771_852_390) for i in range(8)]
    axes = [MeshAxis("devices", 8, 1, "intra-host", tuple(d.name for d in devices))]
    # Times of an 8 x H100 NVSwitch node: ~25 us of latency, then 360-480 GB/s of bus bandwidth at 256M.
    peaks = {"all-reduce": 440e9, "all-gather": 370e9, "reduce-scatter": 360e9, "all-to-all": 340e9, "ppermute": 380e9}
    factors = {"all-reduce": 2 * 7 / 8, "all-gather": 7 / 8, "reduce-scatter": 7 / 8, "all-to-all": 7 / 8, "ppermute": 1.0}
    cells = []
    for name, bus in peaks.items():
        for size in (KIB, 64 * KIB, 4 * MIB, 256 * MIB):
            cells.append(_cell(name, "devices", 8, size, 25e-6 + size * factors[name] / bus))
    for i in range(8):
        for j in range(8):
            if i != j:
                slow = (i, j) == (3, 6)  # one degraded NVLink: its pair at 60% of its peers
                cells.append(_cell("ppermute-pair", "devices", 2, 256 * MIB, 256 * MIB / (230e9 if slow else 380e9),
                                   src=f"cuda:{i}", dst=f"cuda:{j}"))  # fmt: skip
    return assemble(_events(devices, axes, cells, _env(H100, "cuda", 8, False)), elapsed_s=24.9)


def collective_cpu_quick():
    from devctl.collect.bench_collective import assemble

    devices = [BenchDevice(i, f"cpu:{i}", "cpu", "cpu", ("device", "pinned_host", "unpinned_host")) for i in range(4)]
    axes = [MeshAxis("devices", 4, 1, "intra-host", tuple(d.name for d in devices))]
    times = {
        "all-reduce": (111.6e-6, 505.7e-6), "all-gather": (120.9e-6, 396.6e-6), "reduce-scatter": (111.3e-6, 370.1e-6),
        "all-to-all": (126.0e-6, 1.50e-3), "ppermute": (110.2e-6, 476.8e-6),
    }  # fmt: skip
    cells = []
    for name, (small, large) in times.items():
        cells.append(_cell(name, "devices", 4, 4 * KIB, small, samples=60))
        cells.append(_cell(name, "devices", 4, MIB, large, samples=14))
    return assemble(_events(devices, axes, cells, _env("cpu", "cpu", 4, True)), elapsed_s=4.6)
