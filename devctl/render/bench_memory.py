"""`devctl bench memory` output: a row per device and size, then each device's best GB/s against its roof and its
peers, and the stragglers named. At 80 columns the p10-p90 spread gives way first (it stays in --json), then a
note goes on a line under its row."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_memory import MemoryReport
from devctl.render.bench import comparison_lines, comparison_table, overhead_line, pct, spread
from devctl.units import figure, format_seconds, format_size_short


def memory_text(report: MemoryReport) -> None:
    from devctl.render.console import Column, out, print_lines, say, table_lines

    notes = any(c.note for c in report.results)
    columns = [
        Column("device"),
        Column("size", "right"),
        Column("median", "right", priority=2, detail=False),  # GB/s and the size say it too
        Column("p10 – p90", "right", priority=4, detail=False),  # the spread: in --json
        Column("GB/s", "right"),
        Column("% of roof", "right", short="% roof"),
        *([Column("note", priority=3)] if notes else []),
    ]
    rows = []
    for c in report.results:
        gbps = "skipped" if c.skipped else figure(c.gbps)
        rows.append([c.device, format_size_short(c.size_bytes), format_seconds(c.median_s), spread(c.p10_s, c.p90_s),
                     gbps, pct(c.pct_of_roof), *([c.note or ""] if notes else [])])  # fmt: skip
    print_lines(table_lines(columns, rows, title="devctl bench memory (copy: read + write)"))
    out().print()
    print_lines(comparison_table(report.comparison, "Per device: best median GB/s over the sizes, against the roof and the others", format_size_short))
    out().print()
    for line in summary_lines(report):
        say(line, hang="  ")


def summary_lines(report: MemoryReport) -> list[str]:
    lines = comparison_lines(report.comparison, "memory")
    overhead = overhead_line(report.results)
    if overhead:
        lines.append(overhead)
    note = report.environment.get("sweep_note")
    if note:
        lines.append(f"Note: {note}")
    if report.environment.get("quick") and any(comp.stragglers for comp in [report.comparison]):
        lines.append("Note: --quick takes few samples, and a busy machine can slow one device for a moment: rerun without --quick before acting on a straggler")
    lines.append(f"Method: {report.method}")
    return lines


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
