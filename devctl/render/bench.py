"""What every bench's view shares: the progress bar on stderr, tables boxed only where they fit, bars, and (bench
memory and matmul) the per-device comparison with each device's roof and its peers, the straggler and roof lines."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

from devctl.model.bench import Comparison
from devctl.units import digits, figure, format_seconds

BAR_WIDTH = 32
_EIGHTHS = " ▏▎▍▌▋▊▉"


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


def boxed_table(columns, rows: list[list[str]], title: str) -> list:
    """table_lines, boxed only when every column without a priority fits in the box; otherwise plain columns,
    which leave room for all of them (a box costs three cells a column)."""
    from dataclasses import replace

    from devctl.render.console import fit_columns, out, stdout_is_terminal, table_lines

    boxed = stdout_is_terminal()
    if boxed:
        # Full headers: a box is not worth shortening a header for (a matrix's device names).
        fit = fit_columns([replace(c, short=None) for c in columns], rows, out().width)
        boxed = all(place == "table" for col, place in zip(columns, fit.placement) if not col.priority)
    return table_lines(columns, rows, title=title, boxed=boxed)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar in eighths of a character, padded to `width`."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    if not text:
        text = "▏"  # something visible for a nonzero rate
    return text.ljust(width)


class Progress:
    """A progress bar on stderr while cells complete, only when stderr is a terminal; every bench command's.

    `label` names a finished cell from its event.
    """

    def __init__(self, label: Callable[[dict], str]):
        self._label = label
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            from devctl.render.console import err

            self._bar = Bar(
                TextColumn("{task.description}", markup=False),  # the label carries device and variant names
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting jax", total=None)
        return self

    def on_event(self, event: dict) -> None:
        if self._bar is None:
            return
        kind = event.get("event")
        if kind == "joined":  # --distributed: this process is in the cluster
            self._bar.update(self._task, description=f"joined as process {event.get('process_index')}")
        elif kind == "plan":
            self._bar.update(self._task, total=event.get("cells"), description="measuring")
        elif kind == "cell":
            self._bar.update(self._task, advance=1, description=self._label(event))

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
