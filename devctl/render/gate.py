"""What a regression gate found, for stderr (every bench command's --baseline): the verdict, each regressed cell
and how far past its noise band it fell, and the cells left out."""

from __future__ import annotations

from typing import NamedTuple

from devctl.model.gate import BenchGate
from devctl.units import figure


class Fell(NamedTuple):
    """One regressed cell, as a line says it."""

    cell: str
    value: float | None
    change_pct: float | None
    baseline: float
    noise_pct: float | None
    beyond_noise_pct: float | None


def verdict_lines(
    baseline: str, runs: int, max_regression_pct: float, which: str, gated: int, fell: list[Fell], unit: str,
    min_noise_pct: float | None, max_noise_pct: float | None, missing: str = "nothing measured now (skipped)",
) -> list[str]:  # fmt: skip
    base = f"baseline {baseline}" + (f" ({runs} runs pooled)" if runs > 1 else "")
    allowed = f"{max_regression_pct:g}% beyond its noise band"
    if not fell:
        bands = ""
        if min_noise_pct is not None and max_noise_pct is not None:
            low, high = round(min_noise_pct), round(max_noise_pct)
            bands = f" (noise band ±{low}%)" if low == high else f" (noise bands ±{low}% to ±{high}%)"
        return [f"{base}: {gated} {which} gated, none fell more than {allowed}{bands}"]
    lines = [f"{base}: {len(fell)} of {gated} {which} fell more than {allowed}:"]
    for f in fell:
        if f.value is None or f.change_pct is None:
            lines.append(f"  {f.cell}: {missing}, baseline {figure(f.baseline)} {unit}")
            continue
        noise = "" if f.noise_pct is None or f.beyond_noise_pct is None else (
            f" (noise band ±{f.noise_pct:.0f}%: {f.beyond_noise_pct:.0f} points beyond it)"
        )
        lines.append(f"  {f.cell}: {figure(f.value)} {unit}, {f.change_pct:+.0f}% vs {figure(f.baseline)} {unit}{noise}")
    return lines


def gate_lines(gate: BenchGate, left_out: str = "latency cells") -> list[str]:
    """bench memory, matmul and collective: the verdict and, where some were not judged, how many."""
    fell = [Fell(r.cell, r.value, r.change_pct, r.baseline, r.noise_pct, r.beyond_noise_pct) for r in gate.regressions]
    lines = verdict_lines(
        gate.baseline, gate.baseline_runs, gate.max_regression_pct, "cells", gate.gated, fell, gate.unit,
        gate.min_noise_pct, gate.max_noise_pct,
    )  # fmt: skip
    if gate.not_gated:
        lines.append(f"{gate.not_gated} {left_out} not gated")
    return lines
