"""What every bench's view shares: the progress bar on stderr, tables boxed only where they fit, bars, and (bench
memory and matmul) the per-device comparison with each device's roof and its peers, the straggler and roof lines."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

from devctl.model.bench import Comparison
from devctl.units import digits, figure, format_seconds, format_size_short

BAR_WIDTH = 32
# A curve, and a summary of one, needs this many sizes: two are two rows of the table, which says them already.
SWEEP_MIN_SIZES = 3
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


def per_device_text(
    report: Any, title: str, key_columns: list[Any], key_of: Callable[[Any], list[str]], value_of: Callable[[Any], float | None],
    comparisons: Iterable[Comparison], what: Callable[[Comparison], str], size_text: Callable[[int], str], verbose: bool = False,
) -> None:  # fmt: skip
    """bench memory and bench matmul: a row per cell, then, with two or more devices, each device's best figure as a
    bar against the roof (or the fastest device) with its stragglers; the roof, the overhead and the notes."""
    from devctl.render.console import Column, out, table_lines

    comparisons = list(comparisons)
    # A column no cell fills (no roof known: a CPU; no note) is left out, not a column of dashes.
    roofs, notes = any(c.pct_of_roof is not None for c in report.results), any(c.note for c in report.results)
    columns = [
        *key_columns,
        Column("median", "right", priority=2, detail=False),  # the figure and the size say it too
        Column("p10 – p90", "right", priority=4, detail=False),  # the spread: in --json
        Column(comparisons[0].unit, "right"),
        *([Column("% of roof", "right", short="% roof")] if roofs else []),
        *([Column("note", priority=3)] if notes else []),
    ]
    rows = [
        [*key_of(c), format_seconds(c.median_s), spread(c.p10_s, c.p90_s), "skipped" if c.skipped else figure(value_of(c)),
         *([pct(c.pct_of_roof)] if roofs else []), *([c.note or ""] if notes else [])]
        for c in report.results
    ]  # fmt: skip
    lines: list[str] = []
    charts, rules = [], []
    reasons = {comp.roof_reason for comp in comparisons if not comp.roof_name}
    one_reason = len(comparisons) > 1 and len(reasons) == 1 and all(not comp.roof_name for comp in comparisons)
    if one_reason:  # the same for every dtype: said once
        lines.append(f"Roof: none; {_reason(reasons.pop(), any(peers(c) for c in comparisons))}")
    for comp in comparisons:
        charts.append(chart_lines(comp, what(comp), size_text, out().width))
        lines += comparison_lines(comp, what(comp))[1 if one_reason and comp.roof_reason else 0 :]
        if peers(comp):
            rules.append(f"Rule: {comp.rule}")
    lines += overhead_line(report.results)
    note = report.environment.get("sweep_note")
    lines += [f"Note: {note}"] if note else []
    if report.environment.get("quick") and any(comp.stragglers for comp in comparisons):
        lines.append("Note: --quick takes few samples, and a busy machine can slow one device for a moment: rerun without --quick before acting on a straggler")
    if verbose:
        lines += rules[:1] + [f"Method: {report.method}"]
    print_view(table_lines(columns, rows, title=title), charts, lines)


def _reason(reason: str | None, with_peers: bool) -> str | None:
    """Why there is no roof; without peers, not that the devices are compared with each other instead."""
    comparing = ": devices are compared with each other"
    return reason if with_peers or not reason else reason.removesuffix(comparing)


def peers(comp: Comparison) -> bool:
    return sum(f.value is not None for f in comp.figures) >= 2


def chart_lines(comp: Comparison, what: str, size_text: Callable[[int], str], width: int) -> list[str]:
    """Each device's best figure as a bar against the roof (the fastest device's where there is none), with its
    share of the roof, how far it stands from the median and whether it is a straggler; nothing without peers."""
    if not peers(comp):
        return []
    measured = [f for f in comp.figures if f.value is not None]
    sizes = {f.size for f in measured}
    roofs = {f.roof for f in measured}
    roof = roofs.pop() if len(roofs) == 1 else None
    top = roof or max(f.value or 0.0 for f in measured)
    against = "the roof" if roof else "the fastest device"
    head = f"{what.capitalize()}: best median {comp.unit} per device, bars against {against}"
    label_w = max(len(f.device) for f in comp.figures)
    rows: list[tuple[str, float | None, list[str]]] = []
    for f in comp.figures:
        if f.value is None:
            rows.append((f.device, None, ["not measured"]))
            continue
        parts = [figure(f.value)]
        parts += [f"{f.pct_of_roof:.0f}% of roof"] if f.pct_of_roof is not None else []
        parts += [f"at {size_text(f.size)}"] if f.size and len(sizes) > 1 else []
        parts += [f"{signed_pct(f.vs_median_pct)} vs median"] + (["STRAGGLER"] if f.straggler else [])
        rows.append((f.device, f.value, parts))
    widths = [max(len(p[i]) for _, v, p in rows if v is not None and i < len(p)) for i in range(max(len(p) for _, _, p in rows))]
    texts = ["  ".join(part.rjust(widths[i]) if i == 0 else part.ljust(widths[i]) for i, part in enumerate(parts)).rstrip() if value else parts[0]
             for _, value, parts in rows]  # fmt: skip
    bar_w = max(8, min(BAR_WIDTH, width - label_w - max(len(t) for t in texts) - 4))
    lines = [head]
    for (device, value, _), text in zip(rows, texts):
        drawn = bar(value / top, bar_w) if value else " " * bar_w
        lines.append(f"{device.ljust(label_w)} │{drawn} {text}".rstrip())
    return lines


def comparison_lines(comp: Comparison, what: str) -> list[str]:
    """Prose: the roof (or why none) and, where there are peers, the median and the stragglers by name."""
    lines = []
    if comp.roof_name:
        roofs = {f.roof for f in comp.figures if f.roof}
        value = f"{figure(roofs.pop())} {comp.unit}, " if len(roofs) == 1 else ""
        lines.append(f"Roof, {what}: {value}{comp.roof_name} ({comp.roof_source})")
    elif comp.roof_reason:
        lines.append(f"Roof, {what}: none; {_reason(comp.roof_reason, peers(comp))}")
    if not peers(comp):
        return lines
    measured = [f for f in comp.figures if f.value is not None]
    if comp.stragglers:
        named = "; ".join(s.describe(comp.unit, digits=digits(comp.median)) for s in comp.stragglers)
        lines.append(f"STRAGGLER, {what}: {named}")
    else:
        spread_pct = max(abs(f.vs_median_pct or 0) for f in measured)
        lines.append(
            f"Stragglers, {what}: none; {len(measured)} devices, median {figure(comp.median)} {comp.unit}, "
            f"the furthest {spread_pct:.0f}% from it"
        )
    return lines


def overhead_line(cells: Iterable[Any], left_out_of: str = "the figures above", what: str = "launch + sync") -> list[str]:
    """One line (none where nothing was timed): how much longer one call alone took than a call in a burst."""
    import statistics

    values = sorted(c.call_overhead_s for c in cells if getattr(c, "call_overhead_s", None) is not None)
    if not values:
        return []
    ms = lambda s: f"{s * 1e3:.2f}" if s >= 0.5e-5 else "0"  # noqa: E731  # a call alone no slower than in a burst
    low, high, median = ms(values[0]), ms(values[-1]), ms(statistics.median(values))
    spread = f" (cells {low} – {high} ms)" if low != high else ""
    return [f"Per call: {what} {'under 0.01' if median == '0' else median} ms{spread}, not in {left_out_of}"]


def size_chart(title: str, series: dict[Any, list], name: Callable[[Any, list], str], value_of: Callable[[Any], float | None],
               text_of: Callable[[Any], str], width: int | None = None, reserve: int = 18) -> list[str]:  # fmt: skip
    """A figure (GB/s) against size, one block of bars per series (key -> its cells), `reserve` cells of `width` left
    for the size label and the text after a bar; a series measured at fewer than SWEEP_MIN_SIZES sizes, or with no
    figure, has no bars."""
    from devctl.render.console import out, wrap

    width = out().width if width is None else width
    series = {k: v for k, v in series.items() if len(v) >= SWEEP_MIN_SIZES and any(value_of(c) for c in v)}
    top = max((value_of(c) or 0.0 for v in series.values() for c in v), default=None)
    if not series or not top:
        return []
    bar_width = max(min(BAR_WIDTH, width - reserve), 4)
    lines = wrap(f"{title} (GB/s; a full bar is {figure(top)} GB/s)", width, hang="  ")
    for key, group in series.items():
        lines += wrap(name(key, list(series)), width, hang="  ")
        for c in sorted(group, key=lambda c: c.size_bytes):
            label, value = format_size_short(c.size_bytes).rjust(6), value_of(c)
            drawn = f"│ {text_of(c)}" if value is None else f"│{bar(value / top, bar_width)} {text_of(c)}"
            lines.append(f"{label} {drawn}".rstrip())
    return lines


def csv_table(header: list[str], cells: Iterable[Any], **computed: Callable[[Any], Any]) -> tuple[list[str], list[list[Any]]]:
    """--csv of a bench: one row per cell, raw values (sizes in bytes, times in seconds), each column the cell's
    field of that name or, for a column named in `computed`, that function of the cell."""
    rows = [[computed[k](c) if k in computed else getattr(c, k) for k in header] for c in cells]
    return header, rows


def pair_matrix(title: str, cells: Iterable[Any], srcs: list[str], dsts: list[str], text: Callable[[Any], str]) -> list[list]:
    """A source (rows) x destination (columns) matrix of `cells`, in blocks of destinations where it does not fit."""
    from devctl.render.console import Column, fit_columns, out, stdout_is_terminal, table_lines

    width = out().width
    by_pair = {(c.src, c.dst): text(c) for c in cells}

    def blocks(n: int) -> list[tuple[list, list[list[str]]]]:
        return [
            ([Column("")] + [Column(d, "right") for d in dsts[i : i + n]], [[s, *[by_pair.get((s, d), "") for d in dsts[i : i + n]]] for s in srcs])
            for i in range(0, len(dsts), n)
        ]

    def fits(n: int, boxed: bool) -> bool:
        return all(p == "table" for b in blocks(n) for p in fit_columns(*b, width, boxed=boxed).placement)

    count = 1
    while count < len(dsts) and not fits(-(-len(dsts) // count), boxed=False):
        count += 1
    per = -(-len(dsts) // count)
    boxed = stdout_is_terminal() and fits(per, boxed=True)
    return [
        table_lines(columns, rows, title=title + ("" if count == 1 else f", {columns[1].header} to {columns[-1].header}"), boxed=boxed)
        for columns, rows in blocks(per)
    ]


def short_size(n: Any) -> str:
    return format_size_short(n) if isinstance(n, int) else "?"


def print_view(table: list, sections: Iterable[list], prose: Iterable[str]) -> None:
    """A bench's text view: its table, each non-empty section after a blank line, then its prose lines, wrapped."""
    from devctl.render.console import out, print_lines, say

    if table:
        print_lines(table)
    for section in sections:
        if section:
            out().print()
            print_lines(section)
    out().print()
    for line in prose:
        say(line, hang="  ")


def boxed_table(columns, rows: list[list[str]], title: str) -> list:
    """table_lines, boxed only when every column without a priority fits in the box (a box costs three cells a column)."""
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

    `label` names a cell from its event; the bar says it is done (a child announces a cell when it ends, not when
    it starts).
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
        elif kind == "cell" and event.get("counted", True):  # a cell planned only to say why it cannot run is not progress
            self._bar.update(self._task, advance=1, description=f"done: {self._label(event)}")
        elif kind == "dropped":  # planned cells that will not run (a sweep stopped early): the total counts what runs
            total = self._bar.tasks[0].total
            self._bar.update(self._task, total=total - int(event.get("cells", 0)) if total is not None else None)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
