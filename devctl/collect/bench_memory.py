"""`devctl bench memory`: run the measuring child (devctl.probe.bench_memory) and assemble its events into a report,
every device compared with its published HBM peak and with its peers."""

from __future__ import annotations

from typing import Callable

from devctl.model import bench_memory as m

PROBE_MODULE = "devctl.probe.bench_memory"


def run_memory(opts: m.MemoryOptions, timeout_s: float, *, on_event: Callable[[dict], None] | None = None) -> m.MemoryReport:
    from devctl.collect.bench import run_probe

    result = run_probe(PROBE_MODULE, opts.to_request(), timeout_s, "bench memory", on_event)
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.MemoryReport:
    from devctl.collect.bench import cells_of, compare_cells, devices_of, environment_of

    devices = devices_of(events)
    cells = cells_of(events, m.MemoryCell, devices, lambda c: c.size_bytes)
    comparison = compare_cells(
        "copy", "GB/s", cells, devices, ("gbps", "peak_gbps"), lambda c: c.size_bytes, lambda p: p.hbm_gbps, "memory bandwidth"
    )
    return m.MemoryReport(cells, comparison, devices, environment_of(events, elapsed_s), m.METHOD)
