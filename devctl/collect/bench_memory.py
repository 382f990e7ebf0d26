"""`devctl bench memory`: run the measuring child (devctl.probe.bench_memory) and assemble its events into a report,
every device compared with its published HBM peak and with its peers."""

from __future__ import annotations

from devctl.collect.bench import cells_of, chip_runner, compare_cells, devices_of, environment_of
from devctl.model import bench_memory as m


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.MemoryReport:
    devices = devices_of(events)
    cells = cells_of(events, m.MemoryCell, devices, lambda c: c.size_bytes)
    comparison = compare_cells(
        "copy", "GB/s", cells, devices, ("gbps", "peak_gbps"), lambda c: c.size_bytes, lambda p: p.hbm_gbps, "memory bandwidth"
    )
    return m.MemoryReport(cells, comparison, devices, environment_of(events, elapsed_s), m.METHOD)


run_memory = chip_runner("devctl.probe.bench_memory", "bench memory", assemble)
