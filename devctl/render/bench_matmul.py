"""`devctl bench matmul` output: a row per device, dtype and size, then, dtype by dtype, the view every per-device
bench shares (devctl.render.bench.per_device_text)."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_matmul import MatmulReport
from devctl.render.bench import csv_table, per_device_text


def matmul_text(report: MatmulReport, verbose: bool = False) -> None:
    from devctl.render.console import Column

    per_device_text(
        report, "devctl bench matmul (C = A @ B, n x n, 2n³ flops)", [Column("device"), Column("dtype"), Column("n", "right")],
        lambda c: [c.device, c.dtype, str(c.n)], lambda c: c.tflops, report.comparisons,
        lambda comp: f"matmul {comp.metric}", lambda n: f"n={n}", verbose,
    )  # fmt: skip


def csv_rows(report: MatmulReport) -> tuple[list[str], list[list[Any]]]:
    header = ["device", "dtype", "n", "precision", "flops", "samples", "calls_per_sample", "min_s", "median_s", "p10_s",
              "p90_s", "max_s", "single_call_s", "call_overhead_s", "tflops", "peak_tflops", "roof_tflops", "pct_of_roof",
              "verified", "straggler", "skipped", "note"]  # fmt: skip
    slow = {(comp.metric, s.name) for comp in report.comparisons for s in comp.stragglers}
    return csv_table(header, report.results, straggler=lambda c: (c.dtype, c.device) in slow)


def progress_label(event: dict) -> str:
    return f"{event.get('device')} {event.get('dtype')} n={event.get('n')}"
