"""`devctl bench matmul` output: a row per device, dtype and size, then, dtype by dtype, the view every per-device
bench shares (devctl.render.bench.per_device_text)."""

from __future__ import annotations

from typing import Any

from devctl.model.bench_matmul import MatmulReport
from devctl.render.bench import per_device_text


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
    rows = [
        [c.device, c.dtype, c.n, c.precision, c.flops, c.samples, c.calls_per_sample, c.min_s, c.median_s, c.p10_s,
         c.p90_s, c.max_s, c.single_call_s, c.call_overhead_s, c.tflops, c.peak_tflops, c.roof_tflops, c.pct_of_roof,
         c.verified, (c.dtype, c.device) in slow, c.skipped, c.note]  # fmt: skip
        for c in report.results
    ]
    return header, rows


def progress_label(event: dict) -> str:
    return f"{event.get('device')} {event.get('dtype')} n={event.get('n')}"
