"""`devctl bench transfer` output: a table, a bandwidth chart, the fastest paths, the roofs, and JSON."""

from __future__ import annotations

import sys

from devctl.model.bench import Cell, Gate, TransferReport
from devctl.units import format_seconds, format_size_short

BAR_WIDTH = 32
_EIGHTHS = " ▏▎▍▌▋▊▉"


def transfer_text(report: TransferReport) -> None:
    from devctl.render.console import out

    console = out()
    console.print(_results_table(report))
    for matrix in _pair_matrices(report.results):
        console.print(matrix)
    chart = chart_lines(table_cells(report.results))
    if chart:
        console.print()
        for line in chart:
            console.print(line, markup=False, highlight=False)
    console.print()
    for line in summary_lines(report):
        console.print(line, markup=False, highlight=False)


def gate_lines(gate: Gate) -> list[str]:
    """What the regression gate found, for stderr."""
    if not gate.regressions:
        return [
            f"baseline {gate.baseline}: {gate.compared} cells compared, none more than "
            f"{gate.max_regression_pct:g}% below the baseline"
        ]
    lines = [
        f"baseline {gate.baseline}: {len(gate.regressions)} of {gate.compared} cells fell more than "
        f"{gate.max_regression_pct:g}% below the baseline:"
    ]
    for r in gate.regressions:
        now = "no bandwidth (zero-copy or skipped)" if r.gbps is None else f"{r.gbps:.3g} GB/s ({r.change_pct:+.1f}%)"
        lines.append(
            f"  {r.direction} {r.variant} {r.layout} {format_size_short(r.size_bytes)} {r.src}->{r.dst}: "
            f"{now}, baseline {r.baseline_gbps:.3g} GB/s"
        )
    return lines


def _fmt_gbps(c: Cell) -> str:
    if c.skipped:
        return "skipped"
    if c.zero_copy:
        return "zero-copy"
    return "-" if c.gbps is None else f"{c.gbps:.3g}"


def _fmt_pct(c: Cell) -> str:
    return "-" if c.pct_of_roof is None else f"{c.pct_of_roof:.0f}% {_roof_short(c.roof)}"


def _roof_short(kind: str | None) -> str:
    return {"pcie": "PCIe", "host_memcpy": "memcpy"}.get(kind or "", "")


def _spread(c: Cell) -> str:
    if c.p10_s is None or c.p90_s is None:
        return "-"
    return f"{format_seconds(c.p10_s)} – {format_seconds(c.p90_s)}"


def _matrix_groups(cells) -> dict:
    """d2d cells measured for three or more pairs at one size: shown as a source x destination matrix."""
    groups: dict = {}
    for c in cells:
        if c.direction == "d2d" and c.layout == "single" and not c.skipped:
            groups.setdefault((c.direction, c.variant, c.layout, c.size_bytes), []).append(c)
    return {k: v for k, v in groups.items() if len(v) >= 3}


def _results_table(report: TransferReport):
    from devctl.render.console import data_table

    cells = report.results
    layouts = {c.layout for c in cells}
    table = data_table(title="devctl bench transfer")
    table.add_column("Direction")
    table.add_column("Variant")
    if layouts != {"single"}:
        table.add_column("Layout")
    table.add_column("Path")
    table.add_column("Size", justify="right")
    table.add_column("Median", justify="right")
    table.add_column("p10 – p90", justify="right")
    table.add_column("GB/s", justify="right")
    table.add_column("% of roof", justify="right")
    table.add_column("Note")
    for c in table_cells(cells):
        row = [c.direction, c.variant]
        if layouts != {"single"}:
            row.append(c.layout)
        row += [
            f"{c.src} → {c.dst}",
            format_size_short(c.size_bytes),
            format_seconds(c.median_s),
            _spread(c),
            _fmt_gbps(c),
            _fmt_pct(c),
            c.note or "",
        ]
        table.add_row(*row)
    return table


def table_cells(cells) -> list[Cell]:
    """The cells shown row by row: of a d2d pair matrix, only the first pair (the one swept over sizes)."""
    matrices = _matrix_groups(cells)
    first_pair: dict = {}
    for c in cells:
        if c.direction == "d2d" and not c.skipped:
            first_pair.setdefault((c.direction, c.variant, c.layout), (c.src, c.dst))
    return [
        c
        for c in cells
        if (c.direction, c.variant, c.layout, c.size_bytes) not in matrices
        or (c.src, c.dst) == first_pair.get((c.direction, c.variant, c.layout))
    ]


def _pair_matrices(cells) -> list:
    from devctl.render.console import data_table

    out = []
    for (direction, variant, _layout, size), group in _matrix_groups(cells).items():
        srcs = sorted({c.src for c in group}, key=_device_order)
        dsts = sorted({c.dst for c in group}, key=_device_order)
        by_pair = {(c.src, c.dst): c for c in group}
        table = data_table(title=f"{direction} {variant} GB/s at {format_size_short(size)}, source (rows) → destination (columns)")
        table.add_column("")
        for d in dsts:
            table.add_column(d, justify="right")
        for s in srcs:
            table.add_row(s, *[_fmt_gbps(by_pair[(s, d)]) if (s, d) in by_pair else "" for d in dsts])
        out.append(table)
    return out


def _device_order(name: str):
    platform, _, ident = name.partition(":")
    return (platform, int(ident) if ident.isdigit() else 1 << 30, ident)


def chart_lines(cells) -> list[str]:
    """Bandwidth against size, one block of bars per series (direction, variant, layout, path)."""
    series: dict = {}
    for c in cells:
        series.setdefault((c.direction, c.variant, c.layout, c.src, c.dst), []).append(c)
    series = {k: v for k, v in series.items() if len(v) >= 2}
    top = max((c.gbps for v in series.values() for c in v if c.gbps), default=None)
    if not series or not top:
        return []
    lines = [f"Bandwidth against size (GB/s; a full bar is {top:.3g} GB/s)"]
    for (direction, variant, layout, src, dst), group in series.items():
        where = "" if layout == "single" else f" {layout}"
        lines.append(f"{direction} {variant}{where} {src} → {dst}")
        for c in sorted(group, key=lambda c: c.size_bytes):
            label = format_size_short(c.size_bytes).rjust(6)
            if c.gbps is None:
                lines.append(f"{label} │ {_fmt_gbps(c)}")
                continue
            lines.append(f"{label} │{bar(c.gbps / top, BAR_WIDTH)} {c.gbps:.3g}")
    return lines


def bar(fraction: float, width: int) -> str:
    """A horizontal bar in eighths of a character, padded to `width`."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (_EIGHTHS[part] if part else "")
    if not text:
        text = "▏"  # something visible for a nonzero rate
    return text.ljust(width)


def summary_lines(report: TransferReport) -> list[str]:
    lines = []
    for f in report.fastest:
        where = "" if f.layout == "single" else f" ({f.layout})"
        size = format_size_short(f.size_bytes)
        zero = f"; zero-copy (no transfer): {', '.join(f.zero_copy_variants)}" if f.zero_copy_variants else ""
        if f.variant is None:
            lines.append(f"Fastest {f.direction}{where} at {size}: none measured ({f.note}){zero}")
            continue
        roof = ""
        if f.pct_of_roof is not None:
            roof = f", {f.pct_of_roof:.0f}% of {_roof_long(f.roof)} ({f.roof_gbps:.3g} GB/s)"
        lines.append(f"Fastest {f.direction}{where} at {size}: {f.variant}, {f.gbps:.3g} GB/s{roof}{zero}")
    lines += roof_lines(report)
    env = report.environment
    for key in ("sweep_note", "pairs_note"):
        if env.get(key):
            lines.append(f"Note: {env[key]}")
    failed = [c for c in report.results if c.verified is False]
    if failed:
        lines.append(f"Verification FAILED for {len(failed)} cell(s): the bytes did not arrive unchanged")
    return lines


def _roof_long(kind: str | None) -> str:
    return {"pcie": "the PCIe link's peak", "host_memcpy": "host memcpy"}.get(kind or "", "its roof")


def roof_lines(report: TransferReport) -> list[str]:
    lines = []
    memcpy = [r for r in report.roofs.host_memcpy if r.gbps]
    if memcpy:
        biggest = max(memcpy, key=lambda r: r.size_bytes)
        lines.append(f"Roof, host memcpy: {biggest.gbps:.3g} GB/s at {format_size_short(biggest.size_bytes)}")
    for link in report.roofs.pcie:
        if link.peak_gbps is None:
            lines.append(f"Roof, PCIe {link.device}: unknown ({link.reason})")
            continue
        seen = ""
        if link.seen_gen is not None:
            state = "below its maximum" if link.below_max else "at its maximum"
            seen = f"; seen during the transfers: Gen{link.seen_gen} x{link.seen_width}, {state}"
        lines.append(
            f"Roof, PCIe {link.device} ({link.pci_bus_id}): Gen{link.max_gen} x{link.max_width} = "
            f"{link.peak_gbps:.3g} GB/s per direction{seen}"
        )
    if not report.roofs.pcie and report.roofs.pcie_reason:
        lines.append(f"Roof, PCIe: not measured ({report.roofs.pcie_reason})")
    return lines


class Progress:
    """A progress bar on stderr while cells complete, only when stderr is a terminal."""

    def __init__(self):
        self._bar = None
        self._task = None

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            from devctl.render.console import err

            self._bar = Progress(
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
        if kind == "plan":
            self._bar.update(self._task, total=event.get("cells"), description="measuring")
        elif kind == "cell":
            label = f"{event.get('direction')} {event.get('variant')} {_short(event.get('size_bytes'))}"
            self._bar.update(self._task, advance=1, description=label)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def _short(n) -> str:
    from devctl.units import format_size_short

    return format_size_short(n) if isinstance(n, int) else "?"
