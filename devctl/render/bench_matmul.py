"""`devctl bench matmul` output: a row per device, dtype and size, then per dtype each device's best TFLOP/s
against its roof and its peers, and the stragglers named. At 80 columns the p10-p90 spread gives way first (it
stays in --json), then a note goes on a line under its row."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_matmul import MatmulReport
from devctl.render.bench import comparison_lines, comparison_table, overhead_line, pct, spread
from devctl.units import figure, format_seconds


def matmul_text(report: MatmulReport) -> None:
    from devctl.render.console import Column, out, print_lines, say, table_lines

    notes = any(c.note for c in report.results)
    columns = [
        Column("device"),
        Column("dtype"),
        Column("n", "right"),
        Column("median", "right", priority=2, detail=False),  # TFLOP/s and n say it too
        Column("p10 – p90", "right", priority=4, detail=False),  # the spread: in --json
        Column("TFLOP/s", "right"),
        Column("% of roof", "right", short="% roof"),
        *([Column("note", priority=3)] if notes else []),
    ]
    rows = []
    for c in report.results:
        value = "skipped" if c.skipped else figure(c.tflops)
        rows.append([c.device, c.dtype, str(c.n), format_seconds(c.median_s), spread(c.p10_s, c.p90_s), value,
                     pct(c.pct_of_roof), *([c.note or ""] if notes else [])])  # fmt: skip
    print_lines(table_lines(columns, rows, title="devctl bench matmul (C = A @ B, n x n, 2n³ flops)"))
    for comp in report.comparisons:
        out().print()
        print_lines(comparison_table(comp, f"Per device, {comp.metric}: best median TFLOP/s over the sizes, against the roof and the others", lambda n: f"n={n}"))
    out().print()
    for line in summary_lines(report):
        say(line, hang="  ")


def summary_lines(report: MatmulReport) -> list[str]:
    lines = []
    for comp in report.comparisons:
        lines += comparison_lines(comp, f"matmul {comp.metric}")
    lines = _rule_once(lines)
    overhead = overhead_line(report.results)
    if overhead:
        lines.append(overhead)
    note = report.environment.get("sweep_note")
    if note:
        lines.append(f"Note: {note}")
    if report.environment.get("quick") and any(comp.stragglers for comp in report.comparisons):
        lines.append("Note: --quick takes few samples, and a busy machine can slow one device for a moment: rerun without --quick before acting on a straggler")
    lines.append(f"Method: {report.method}")
    return lines


def _rule_once(lines: list[str]) -> list[str]:
    """The straggler rule is the same for every dtype: say it once, last."""
    rules = [line for line in lines if line.startswith("Rule: ")]
    rest = [line for line in lines if not line.startswith("Rule: ")]
    return rest + rules[:1]


def csv_rows(report: MatmulReport) -> tuple[list[str], list[list[Any]]]:
    header = ["device", "dtype", "n", "precision", "flops", "samples", "calls_per_sample", "min_s", "median_s", "p10_s",
              "p90_s", "max_s", "single_call_s", "call_overhead_s", "tflops", "peak_tflops", "roof_tflops", "pct_of_roof",
              "verified", "straggler", "skipped", "note"]  # fmt: skip
    slow = {(comp.metric, s.name) for comp in report.comparisons for s in comp.stragglers}
    rows = [
        [c.device, c.dtype, c.n, c.precision, c.flops, c.samples, c.calls_per_sample, c.min_s, c.median_s, c.p10_s,
         c.p90_s, c.max_s, c.single_call_s, c.call_overhead_s, c.tflops, c.peak_tflops, c.roof_tflops, c.pct_of_roof,
         c.verified, (c.dtype, c.device) in slow, c.skipped, c.note]  # fmt: skip
        for c in report.results
    ]
    return header, rows


def progress_label(event: dict) -> str:
    return f"{event.get('device')} {event.get('dtype')} n={event.get('n')}"
