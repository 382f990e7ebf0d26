"""`devctl bench collective` output: a table, the --all-pairs link matrices, a bus-bandwidth chart, and the mesh,
latencies, roofs and stragglers in prose."""

from __future__ import annotations

from typing import Any

from devctl.model import bench_collective as m
from devctl.model.bench_collective import CollectiveCell, CollectiveReport
from devctl.render.bench import SWEEP_MIN_SIZES, boxed_table, csv_table, overhead_line, pair_matrix, pct, print_view, short_size, size_chart, spread
from devctl.units import figure, format_seconds, format_size_short


def collective_text(report: CollectiveReport, verbose: bool = False) -> None:
    rows = [c for c in report.results if c.collective != "ppermute-pair"]
    lines = summary_lines(report) + ([f"Method: {m.METHOD}; {m.BUSBW_RULE}"] if verbose else [])
    print_view(_results_table(rows) if rows else [], [*_pair_matrices(report.results), chart_lines(rows)], lines)


def _busbw(c: CollectiveCell) -> str:
    if c.skipped:
        return "skipped"
    return figure(c.busbw_gbps)


def _results_table(cells: list[CollectiveCell]) -> list:
    from devctl.render.console import Column

    # A column no cell fills (no roof known, no note) is left out, not a column of dashes.
    roofs, notes = any(c.pct_of_roof is not None for c in cells), any(c.note for c in cells)
    columns = [
        Column("collective"),
        Column("axis"),
        Column("dtype", priority=5),
        Column("size", "right"),
        Column("median", "right"),  # the median call: a latency at small sizes
        Column("p10 – p90", "right", priority=4, detail=False),  # the spread: in --json and --csv
        Column("samples", "right", priority=6, detail=False),
        Column("algbw", "right", priority=2, detail=False),  # GB/s; busbw and the size say it too
        Column("busbw", "right"),
        *([Column("% of roof", "right", priority=1, short="% roof")] if roofs else []),
        *([Column("note", priority=3)] if notes else []),
    ]
    rows = [
        [
            c.collective, f"{c.axis} ({c.ranks})", c.dtype, format_size_short(c.size_bytes), format_seconds(c.median_s),
            spread(c.p10_s, c.p90_s), str(c.samples or "-"), figure(c.algbw_gbps), _busbw(c),
            *([pct(c.pct_of_roof)] if roofs else []), *([c.note or ""] if notes else []),
        ]
        for c in cells
    ]  # fmt: skip
    return boxed_table(columns, rows, "devctl bench collective (GB/s, decimal)")


def _pair_groups(cells) -> dict:
    groups: dict = {}
    for c in cells:
        if c.collective == "ppermute-pair":
            groups.setdefault((c.axis, c.size_bytes, c.dtype), []).append(c)
    return groups


def _pair_matrices(cells) -> list[list]:
    tables = []
    for (axis, size, dtype), group in _pair_groups(cells).items():
        names = list(dict.fromkeys([c.src for c in group] + [c.dst for c in group]))
        title = f"ppermute GB/s on axis {axis} at {format_size_short(size)} {dtype}, source (rows) → destination (columns)"
        tables += pair_matrix(title, group, names, names, _busbw)
    return tables


def chart_lines(cells, width: int | None = None) -> list[str]:
    """Bus bandwidth against size, one block of bars per collective and axis (and dtype, where there are several)."""
    series: dict = {}
    for c in cells:
        series.setdefault((c.collective, c.axis, c.ranks, c.dtype), []).append(c)

    def name(key: tuple, keys: list) -> str:
        collective, axis, ranks, dtype = key
        return f"{collective} on {axis} ({ranks})" + (f" {dtype}" if len({k[3] for k in keys}) > 1 else "")

    return size_chart("Bus bandwidth against size", series, name, lambda c: c.busbw_gbps, _busbw, width)


def summary_lines(report: CollectiveReport) -> list[str]:
    """The mesh, each collective's latency and best bus bandwidth (over a sweep of sizes), the roof, the stragglers
    and the notes."""
    lines = []
    for a in report.axes:
        groups = f", {a.groups} groups at once" if a.groups > 1 else ""
        lines.append(f"Axis {a.name}: {a.size} devices ({', '.join(a.first_group)}{groups}), {a.scope}")
    measured = [c for c in report.results if not c.skipped and c.median_s and c.collective != "ppermute-pair"]
    for axis in dict.fromkeys(c.axis for c in measured):
        on_axis = [c for c in measured if c.axis == axis]
        if len({c.size_bytes for c in on_axis}) < SWEEP_MIN_SIZES:
            continue
        smallest = min(c.size_bytes for c in on_axis)
        latency = [f"{c.collective} {format_seconds(c.median_s)}" for c in on_axis if c.size_bytes == smallest and c.latency]
        if latency:
            lines.append(f"Latency on {axis} (median at {format_size_short(smallest)}): {', '.join(latency)}")
        best = []
        for name in dict.fromkeys(c.collective for c in on_axis):
            top = max((c for c in on_axis if c.collective == name), key=lambda c: c.busbw_gbps or 0)
            share = f", {top.pct_of_roof:.0f}% of the link peak" if top.pct_of_roof is not None else ""
            best.append(f"{name} {figure(top.busbw_gbps)} at {format_size_short(top.size_bytes)}{share}")
        lines.append(f"Best busbw on {axis} (GB/s): {'; '.join(best)}")
    roofs = {c.roof_gbps for c in report.results if c.roof_gbps}
    if roofs:
        lines.append(f"Roof: {figure(max(roofs))} GB/s per device, one direction, over all its links (the published link bandwidth)")
    env = report.environment
    if env.get("roof_note"):
        lines.append(f"Roof: {env['roof_note']}")
    lines += straggler_lines(report)
    lines += overhead_line(
        report.results, f"the figures of the cells above {format_size_short(m.LATENCY_MAX_BYTES)} (timed in bursts); the latency cells include it"
    )
    lines += [f"Note: {env[key]}" for key in ("axes_note", "sweep_note") if env.get(key)]
    return lines


def straggler_lines(report: CollectiveReport) -> list[str]:
    lines = []
    for s in report.stragglers:
        what = "link" if s.kind == "link" else "host"
        lines.append(
            f"Straggler {what}: {s.name} {figure(s.gbps)} GB/s, {s.deviation_pct:.0f}% below the median {figure(s.median_gbps)} GB/s "
            f"({s.collective} on {s.axis} at {format_size_short(s.size_bytes)})"
        )
    links = {(c.src, c.dst) for c in report.results if c.collective == "ppermute-pair" and not c.skipped}
    if links and not any(s.kind == "link" for s in report.stragglers):
        lines.append(f"Stragglers: none among {len(links)} links (none further below the median than 10% or 3 robust deviations)")
    processes = {h.process_index for h in report.hosts}
    if len(processes) > 1 and not any(s.kind == "host" for s in report.stragglers):
        lines.append(f"Stragglers: none among {len(processes)} processes (each process's own busbw at the largest size)")
    return lines


def csv_rows(report: CollectiveReport) -> tuple[list[str], list[list[Any]]]:
    header = [
        "collective", "axis", "ranks", "dtype", "size_bytes", "src", "dst", "samples", "min_s", "p10_s", "median_s",
        "p90_s", "max_s", "algbw_gbps", "busbw_gbps", "roof_gbps", "pct_of_roof", "skipped", "note",
    ]  # fmt: skip
    return csv_table(header, report.results)


def progress_label(event: dict) -> str:
    """A finished cell, as the progress bar (render.bench.Progress) names it."""
    return f"{event.get('collective')} {event.get('axis')} {short_size(event.get('size_bytes'))}"
