"""`devctl bench memory` output: a row per device and size, then the view every per-device bench shares
(devctl.render.bench.per_device_text)."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_memory import MemoryReport
from devctl.render.bench import per_device_text
from devctl.units import format_size_short


def memory_text(report: MemoryReport, verbose: bool = False) -> None:
    from devctl.render.console import Column

    per_device_text(
        report, "devctl bench memory (copy: read + write)", [Column("device"), Column("size", "right")],
        lambda c: [c.device, format_size_short(c.size_bytes)], lambda c: c.gbps, [report.comparison],
        lambda comp: "memory", format_size_short, verbose,
    )  # fmt: skip


def csv_rows(report: MemoryReport) -> tuple[list[str], list[list[Any]]]:
    header = ["device", "size_bytes", "bytes_moved", "samples", "calls_per_sample", "min_s", "median_s", "p10_s", "p90_s",
              "max_s", "single_call_s", "call_overhead_s", "gbps", "peak_gbps", "roof_gbps", "pct_of_roof", "verified",
              "straggler", "skipped", "note"]  # fmt: skip
    slow = {s.name for s in report.comparison.stragglers}
    rows = [
        [c.device, c.size_bytes, c.bytes_moved, c.samples, c.calls_per_sample, c.min_s, c.median_s, c.p10_s, c.p90_s,
         c.max_s, c.single_call_s, c.call_overhead_s, c.gbps, c.peak_gbps, c.roof_gbps, c.pct_of_roof, c.verified,
         c.device in slow, c.skipped, c.note]  # fmt: skip
        for c in report.results
    ]
    return header, rows


def progress_label(event: dict) -> str:
    size = event.get("size_bytes")
    return f"{event.get('device')} {format_size_short(size) if isinstance(size, int) else '?'}"
