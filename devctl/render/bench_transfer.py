"""`devctl bench transfer` output: a table, the d2d pair matrices, a bandwidth chart, the fastest paths, the roofs."""

from __future__ import annotations

from devctl.model.bench_transfer import LATENCY_MAX_BYTES, METHOD, Cell, Fastest, Roofs, TransferReport, above_roof
from devctl.render.bench import boxed_table, csv_table, overhead_line, pair_matrix, print_view, short_size, size_chart, spread
from devctl.units import figure, format_seconds, format_size_short


def transfer_text(report: TransferReport, verbose: bool = False) -> None:
    # d2d on one device has nothing to copy between: one note says so, not a skipped row per size.
    shown = [c for c in report.results if not _alone(c, report)]
    rows = table_cells(shown)
    lines = summary_lines(report) + ([f"Method: {METHOD}"] if verbose else [])
    print_view(_results_table(rows) if rows else [], [*_pair_matrices(shown), *charts(rows)], lines)


def _alone(c: Cell, report: TransferReport) -> bool:
    """A d2d cell skipped because this run has one device: no pair to copy between."""
    return c.direction == "d2d" and c.skipped and (c.dst == "none" or len(report.devices) == 1)


def _fmt_gbps(c: Cell) -> str:
    if c.skipped:
        return "skipped"
    if c.zero_copy:
        return "zero-copy"
    return figure(c.gbps)


def _fmt_pct(c: Cell) -> str:
    if c.suspect:  # above its roof: the percentage would mislead (the summary says why)
        return "suspect"
    short = {"pcie": "PCIe", "host_memcpy": "memcpy"}.get(c.roof or "", "")
    return "-" if c.pct_of_roof is None else f"{c.pct_of_roof:.0f}% {short}"


def _matrix_groups(cells) -> dict:
    """d2d cells measured for three or more pairs at one size: shown as a source x destination matrix."""
    groups: dict = {}
    for c in cells:
        if c.direction == "d2d" and c.layout == "single" and not c.skipped:
            groups.setdefault((c.direction, c.variant, c.layout, c.size_bytes), []).append(c)
    return {k: v for k, v in groups.items() if len(v) >= 3}


def _results_table(cells: list[Cell]) -> list:
    from devctl.render.console import Column

    mesh = any(c.layout != "single" for c in cells)
    # A column no cell fills (no roof: NVLink, a CPU mesh; no note) is left out, not a column of dashes.
    roofs, notes = any(c.pct_of_roof is not None or c.suspect for c in cells), any(c.note for c in cells)
    columns = [Column("direction"), Column("variant")]
    if mesh:
        columns.append(Column("layout"))
    columns += [
        Column("path"),
        Column("size", "right"),
        Column("median", "right", priority=2, detail=False),  # GB/s and the size say it too
        Column("p10 – p90", "right", priority=4, detail=False),  # the spread: in --json
        Column("GB/s", "right"),
        *([Column("% of roof", "right", priority=1, detail=False)] if roofs else []),  # the first to go on a narrow terminal
        *([Column("note", priority=3)] if notes else []),
    ]
    rows = []
    for c in cells:
        rows.append([
            c.direction, c.variant, *([c.layout] if mesh else []), f"{c.src} → {c.dst}", format_size_short(c.size_bytes),
            format_seconds(c.median_s), spread(c.p10_s, c.p90_s), _fmt_gbps(c), *([_fmt_pct(c)] if roofs else []), *([c.note or ""] if notes else []),
        ])  # fmt: skip
    return boxed_table(columns, rows, "devctl bench transfer")


def table_cells(cells) -> list[Cell]:
    """The cells shown row by row, grouped by direction and path: of a d2d pair matrix, only the first pair (the one
    swept over sizes)."""
    matrices = _matrix_groups(cells)
    first_pair: dict = {}
    for c in cells:
        if c.direction == "d2d" and not c.skipped:
            first_pair.setdefault((c.direction, c.variant, c.layout), (c.src, c.dst))
    shown = [
        c
        for c in cells
        if (c.direction, c.variant, c.layout, c.size_bytes) not in matrices
        or (c.src, c.dst) == first_pair.get((c.direction, c.variant, c.layout))
    ]
    # Grouped by direction and path (in the order first measured), each path's sizes together.
    paths: dict[tuple, int] = {}
    for c in shown:
        paths.setdefault((c.direction, c.variant, c.layout, c.src, c.dst), len(paths))
    return sorted(shown, key=lambda c: (paths[(c.direction, c.variant, c.layout, c.src, c.dst)], c.size_bytes))


def _pair_matrices(cells) -> list[list]:
    tables = []
    for (direction, variant, _layout, size), group in _matrix_groups(cells).items():
        srcs = sorted({c.src for c in group}, key=_device_order)
        dsts = sorted({c.dst for c in group}, key=_device_order)
        title = f"{direction} {variant} GB/s at {format_size_short(size)}, source (rows) → destination (columns)"
        tables += pair_matrix(title, group, srcs, dsts, _fmt_gbps)
    return tables


def _device_order(name: str):
    platform, _, ident = name.partition(":")
    return (platform, int(ident) if ident.isdigit() else 1 << 30, ident)


def charts(cells, width: int | None = None) -> list[list[str]]:
    """Bandwidth against size: host <-> device transfers and copies on and between devices each on a scale of their
    own, where both were measured (an H100's on-device copy at 998 GB/s left its 53 GB/s PCIe transfers a sliver)."""
    host = [c for c in cells if c.direction in ("h2d", "d2h")]
    device = [c for c in cells if c.direction not in ("h2d", "d2h")]
    if not host or not device:
        return [chart_lines(cells, width)]
    return [chart_lines(host, width, ", host <-> device"), chart_lines(device, width, ", on and between devices")]


def chart_lines(cells, width: int | None = None, which: str = "") -> list[str]:
    """Bandwidth against size, one block of bars per series (direction, variant, layout, path)."""
    series: dict = {}
    for c in cells:
        series.setdefault((c.direction, c.variant, c.layout, c.src, c.dst), []).append(c)

    def name(key: tuple, _keys: list) -> str:
        direction, variant, layout, src, dst = key
        return f"{direction} {variant}{'' if layout == 'single' else ' ' + layout} {src} → {dst}"

    text = lambda c: _fmt_gbps(c) + (" (suspect)" if c.suspect and c.gbps is not None else "")  # noqa: E731
    # "  256M │" before the bar, " 0.0365 (suspect)" after it.
    return size_chart(f"Bandwidth against size{which}", series, name, lambda c: c.gbps, text, width, reserve=26)


def summary_lines(report: TransferReport) -> list[str]:
    """The fastest paths, the roofs and the notes: prose lines, each wrapped to the terminal by the caller."""
    lines = []
    for f in report.fastest:
        # A direction with one path measured and nothing to add is its table row again: said there, not twice.
        if f.others or f.zero_copy_variants or f.advice or f.variant is None or above_roof(f.pct_of_roof):
            lines.append(verdict_line(f, report.roofs))
        if f.advice:
            lines.append(f"Advice: {f.advice}")
    lines += roof_lines(report)
    lines += overhead_line(
        report.results, f"the figures of the cells above {format_size_short(LATENCY_MAX_BYTES)} (timed in bursts, where transfers "
        "from one source may overlap); the latency cells include it", "waiting on each transfer alone adds",
    )  # fmt: skip
    lines += [f"Note: {report.environment[k]}" for k in ("sweep_note", "pairs_note") if report.environment.get(k)]
    if any(_alone(c, report) for c in report.results):
        self_copies = any(c.direction == "d2d-self" for c in report.results)
        lines.append("Note: d2d: one device here, nothing to copy between; "
                     + ("d2d-self measures on-device copies" if self_copies else "--direction d2d-self measures on-device copies"))  # fmt: skip
    layouts = sorted({c.layout for c in report.results if c.layout != "single" and not c.skipped})
    if layouts:
        # A mesh cell's figure is what crossed every device's link together: say so beside the roof it is held to.
        lines.append(
            f"Note: {' and '.join(layouts)}: GB/s is the aggregate over every device of the mesh (the bytes that "
            "crossed all links, N x the size when replicated), held against the sum of their links' roofs; "
            "--json has per_device_gbps"
        )
    suspect = [c for c in report.results if c.suspect]
    if suspect:
        which = "1 cell came out faster than its roof" if len(suspect) == 1 else f"{len(suspect)} cells came out faster than their roofs"
        lines.append(
            f"Note: suspect: {which}, which no copy can beat: the roof was measured while the machine was busier, "
            "or the timing is off; rerun on an idle machine (--json has each cell's reason)"
        )
    failed = [c for c in report.results if c.verified is False]
    if failed:
        lines.append(f"Verification FAILED for {len(failed)} cell(s): the bytes did not arrive unchanged")
    return lines


def verdict_line(f: Fastest, roofs: Roofs) -> str:
    """One direction's verdict: its fastest path (only where two or more were measured is it called that), how far
    it is from the roof, named as the link when known, then each other path measured and its share of that roof:
    `Fastest h2d at 1G: pinned 49.5 GB/s, 79% of PCIe Gen5 x16 (63.0 GB/s); pageable 6.91 GB/s, 11%`."""
    where = "" if f.layout == "single" else f" ({f.layout})"
    size = format_size_short(f.size_bytes)
    zero = f"; zero-copy (no transfer): {', '.join(f.zero_copy_variants)}" if f.zero_copy_variants else ""
    if f.variant is None:
        return f"{f.direction}{where} at {size}: none measured ({f.note}){zero}"
    roof = ""
    name = _roof_long(f.roof, f.roof_gbps, roofs)
    if above_roof(f.pct_of_roof):
        roof = f", suspect: above {name} ({figure(f.roof_gbps)} GB/s)"
    elif f.pct_of_roof is not None:
        roof = f", {f.pct_of_roof:.0f}% of {name} ({figure(f.roof_gbps)} GB/s)"
    others = "".join(f"; {o.variant} {figure(o.gbps)} GB/s{_share(o.pct_of_roof)}" for o in f.others)
    lead = "Fastest " if f.others else ""
    return f"{lead}{f.direction}{where} at {size}: {f.variant} {figure(f.gbps)} GB/s{roof}{others}{zero}"


def _share(pct: float | None) -> str:
    if pct is None:
        return ""
    return ", suspect" if above_roof(pct) else f", {pct:.0f}%"


def _roof_long(kind: str | None, roof_gbps: float | None = None, roofs: Roofs | None = None) -> str:
    """A roof's name in prose; a PCIe roof as its link (`PCIe Gen5 x16`, `8 PCIe Gen5 x16 links` for a mesh's
    sum) where the links read say which, else as the link's peak."""
    if kind == "pcie" and roof_gbps and roofs is not None:
        link = _link_name(roof_gbps, roofs)
        if link:
            return link
    return {"pcie": "the PCIe link's peak", "host_memcpy": "host memcpy"}.get(kind or "", "its roof")


def _link_name(roof_gbps: float, roofs: Roofs) -> str | None:
    """The PCIe link(s) a roof of `roof_gbps` is: the generation and width of every link with that peak, when they
    agree; a whole multiple of one peak shared by every link read is that many links (a mesh's roof is their sum)."""
    import math

    links = [link for link in roofs.pcie if link.peak_gbps and link.max_gen and link.max_width]
    same = {(link.max_gen, link.max_width) for link in links if math.isclose(link.peak_gbps or 0.0, roof_gbps, rel_tol=1e-6)}
    if len(same) == 1:
        gen, width = same.pop()
        return f"PCIe Gen{gen} x{width}"
    kinds = {(link.max_gen, link.max_width, link.peak_gbps) for link in links}
    if len(kinds) == 1:
        gen, width, peak = kinds.pop()
        count = roof_gbps / (peak or roof_gbps)
        if count > 1 and math.isclose(count, round(count), rel_tol=1e-6):
            return f"{round(count)} PCIe Gen{gen} x{width} links"
    return None


def roof_lines(report: TransferReport) -> list[str]:
    lines = []
    memcpy = sorted((r for r in report.roofs.host_memcpy if r.gbps), key=lambda r: r.gbps or 0.0)
    # Said where a cell is held to it (CPU devices); a GPU's pageable transfers are not one thread's copy.
    if memcpy and any(c.roof == "host_memcpy" for c in report.results):
        at = lambda r: f"{figure(r.gbps)} GB/s at {format_size_short(r.size_bytes)}"  # noqa: E731
        fewest = min(r.samples for r in memcpy)
        if len(memcpy) == 1:
            lines.append(f"Roof, host memcpy: {at(memcpy[0])} (the best of {fewest} one-thread copies)")
        else:
            lines.append(f"Roof, host memcpy, measured at each size (the best of {fewest} or more one-thread copies): "
                         f"{at(memcpy[0])} to {at(memcpy[-1])}")  # fmt: skip
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
            f"{figure(link.peak_gbps)} GB/s per direction{seen}"
        )
    if not report.roofs.pcie and report.roofs.pcie_reason:
        lines.append(f"Roof, PCIe: not measured ({report.roofs.pcie_reason})")
    return lines


def progress_label(event: dict) -> str:
    return f"{event.get('direction')} {event.get('variant')} {short_size(event.get('size_bytes'))}"


def csv_rows(report: TransferReport) -> tuple[list[str], list[list]]:
    """One row per cell, raw values: sizes in bytes, times in seconds, bandwidths in GB/s (decimal)."""
    header = [
        "direction", "variant", "layout", "src", "dst", "size_bytes", "bytes_moved", "method", "calls_per_sample",
        "samples", "min_s", "p10_s", "median_s", "p90_s", "max_s", "single_call_s", "call_overhead_s", "gbps",
        "per_device_gbps", "zero_copy", "verified", "roof", "roof_gbps", "pct_of_roof", "suspect", "skipped", "note",
    ]  # fmt: skip
    return csv_table(header, report.results)
