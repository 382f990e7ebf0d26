"""`devctl bench memory`: run the measuring child (devctl.probe.bench_memory) and assemble its events into a report,
every device compared with its published HBM peak and with its peers."""

from __future__ import annotations

from typing import Callable

from devctl.model import bench_memory as m
from devctl.model.bench import best_by_device, compare, fastest_by_device

PROBE_MODULE = "devctl.probe.bench_memory"


def run_memory(opts: m.MemoryOptions, timeout_s: float, *, on_event: Callable[[dict], None] | None = None) -> m.MemoryReport:
    from devctl.collect.bench import run_probe

    result = run_probe(PROBE_MODULE, opts.to_request(), timeout_s, "bench memory", on_event)
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.MemoryReport:
    from devctl.collect.bench import devices_of, environment_of, roof_words
    from devctl.model import from_dict

    devices = devices_of(events)
    order = {d.name: i for i, d in enumerate(devices)}
    # The child measures size by size (every device taking turns); a reader compares a device's sizes: by device.
    cells = tuple(sorted((from_dict(m.MemoryCell, e) for e in events if e.get("event") == "cell"),
                         key=lambda c: (order.get(c.device, len(order)), c.size_bytes)))  # fmt: skip
    roofs, name, source, reason = roof_words(devices, lambda p: p.hbm_gbps)
    comparison = compare(
        "copy",
        "GB/s",
        best_by_device(cells, lambda c: c.gbps, lambda c: c.size_bytes),
        {d.name: d.device_kind for d in devices},
        roofs,
        fastest=fastest_by_device(cells, lambda c: c.peak_gbps),
        roof_name=f"{name} memory bandwidth" if name else None,
        roof_source=source,
        roof_reason=reason,
    )
    return m.MemoryReport(cells, comparison, devices, environment_of(events, elapsed_s), m.METHOD)
