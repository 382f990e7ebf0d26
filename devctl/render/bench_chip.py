"""What the `bench memory` and `bench matmul` views share: the per-device comparison table (each device's best
figure against its roof and its peers), the straggler and roof lines, and the progress bar on stderr."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from devctl.model.bench_chip import Comparison
from devctl.units import digits, figure, format_seconds


def spread(p10_s: float | None, p90_s: float | None) -> str:
    if p10_s is None or p90_s is None:
        return "-"
    return f"{format_seconds(p10_s)} – {format_seconds(p90_s)}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def signed_pct(value: float | None) -> str:
    if value is None:
        return "-"
    return "0%" if round(value) == 0 else f"{value:+.0f}%"


def comparison_table(comp: Comparison, title: str, size_text: Callable[[int], str]) -> list:
    """One row per device: its best median figure, the size it came at, its % of roof, its fastest call and how its
    figure stands against the median of every device's."""
    from devctl.render.console import Column, table_lines

    columns = [
        Column("device"),
        Column("kind", priority=2),
        Column(comp.unit, "right"),
        Column("at", "right", priority=1),
        Column("% of roof", "right", short="% roof"),
        Column("fastest", "right", priority=3, detail=False),  # the rule's second look; --json has it
        Column("vs median", "right", short="vs med"),
        Column("verdict"),
    ]
    rows = []
    for f in comp.figures:
        verdict = "STRAGGLER" if f.straggler else ("not measured" if f.value is None else "ok")
        if len(comp.figures) < 2 and f.value is not None:
            verdict = "no peers"
        rows.append([f.device, f.device_kind, figure(f.value), size_text(f.size) if f.size else "-", pct(f.pct_of_roof),
                     figure(f.fastest), signed_pct(f.vs_median_pct), verdict])  # fmt: skip
    return table_lines(columns, rows, title=title)


def comparison_lines(comp: Comparison, what: str) -> list[str]:
    """Prose: the roof (or why none), the median, the stragglers by name, the rule."""
    lines = []
    if comp.roof_name:
        lines.append(f"Roof, {what}: {comp.roof_name} ({comp.roof_source})")
    elif comp.roof_reason:
        lines.append(f"Roof, {what}: none; {comp.roof_reason}")
    measured = [f for f in comp.figures if f.value is not None]
    if len(measured) < 2:
        lines.append(f"Stragglers, {what}: {len(measured)} device measured, no peers to compare with")
        return lines
    if comp.stragglers:
        named = "; ".join(s.describe(comp.unit, digits=digits(comp.median)) for s in comp.stragglers)
        lines.append(f"STRAGGLER, {what}: {named}")
    else:
        spread_pct = max(abs(f.vs_median_pct or 0) for f in measured)
        lines.append(
            f"Stragglers, {what}: none; {len(measured)} devices, median {figure(comp.median)} {comp.unit}, "
            f"the furthest {spread_pct:.0f}% from it"
        )
    lines.append(f"Rule: {comp.rule}")
    return lines


def overhead_line(cells: Iterable[Any]) -> str | None:
    """One line: how much longer one call timed alone took than a call in a burst (JAX's launch and the host's
    sync), which the figures leave out and a step that waits for its result pays; the median over the cells, and
    their range. None: nothing timed."""
    import statistics

    values = sorted(c.call_overhead_s for c in cells if getattr(c, "call_overhead_s", None) is not None)
    if not values:
        return None
    low, high = f"{values[0] * 1e3:.2f}", f"{values[-1] * 1e3:.2f}"
    spread = f" (cells {low} – {high})" if low != high else ""
    return f"Per call: launch + sync {statistics.median(values) * 1e3:.2f} ms{spread}, not in the figures above"
