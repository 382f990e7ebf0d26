"""`devctl bench memory` output: a row per device and size, then the view every per-device bench shares
(devctl.render.bench.per_device_text)."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_memory import MemoryReport
from devctl.render.bench import csv_table, per_device_text, short_size
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
    return csv_table(header, report.results, straggler=lambda c: c.device in slow)


def progress_label(event: dict) -> str:
    return f"{event.get('device')} {short_size(event.get('size_bytes'))}"
