"""What a regression gate found, for stderr (every bench command's --baseline): the verdict, each regressed cell
and how far past its noise band it fell, and the cells left out and why."""

from __future__ import annotations

from devctl.model.gate import GATE_LEFT_OUT_WORDS, Gate, GateSpec
from devctl.units import figure


def gate_lines(gate: Gate, spec: GateSpec) -> list[str]:
    base = f"baseline {gate.baseline}" + (f" ({gate.baseline_runs} runs pooled)" if gate.baseline_runs > 1 else "")
    allowed = f"{gate.max_regression_pct:g}% beyond its noise band"
    which = "cells" if gate.all_sizes else spec.judged_words
    unit = gate.unit
    if not gate.regressions:
        bands = ""
        if gate.min_noise_pct is not None and gate.max_noise_pct is not None:
            low, high = round(gate.min_noise_pct), round(gate.max_noise_pct)
            bands = f" (noise band ±{low}%)" if low == high else f" (noise bands ±{low}% to ±{high}%)"
        lines = [f"{base}: {gate.gated} {which} gated, none fell more than {allowed}{bands}"]
    else:
        lines = [f"{base}: {len(gate.regressions)} of {gate.gated} {which} fell more than {allowed}:"]
    for r in gate.regressions:
        if r.value is None or r.change_pct is None:
            missing = "not in this run (the baseline has it)" if r.absent else spec.missing_words
            lines.append(f"  {r.cell}: {missing}, baseline {figure(r.baseline)} {unit}")
            continue
        noise = "" if r.noise_pct is None or r.beyond_noise_pct is None else (
            f" (noise band ±{r.noise_pct:.0f}%: {r.beyond_noise_pct:.0f} points beyond it)"
        )
        lines.append(f"  {r.cell}: {figure(r.value)} {unit}, {r.change_pct:+.0f}% vs {figure(r.baseline)} {unit}{noise}")
    for why, n in gate.left_out.items():
        words = {**GATE_LEFT_OUT_WORDS, **spec.left_out_words}
        lines.append(words.get(why, "{n} cells not gated ({why})").format(n=n, why=why))
    return lines
