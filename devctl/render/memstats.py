"""`devctl memstats` as tables, and the live `--watch` view (bars with the peak marked, sparklines, processes)."""

from __future__ import annotations

from collections import defaultdict, deque

from devctl.render.console import data_table, out
from devctl.text import printable
from devctl.units import format_bytes

_SPARK = "▁▂▃▄▅▆▇█"
# Table cells and lines carry text other users and jobs wrote (command lines, snapshot fields, file
# names): every one goes through printable() so no escape sequence or newline reaches the terminal.
_CELL_CHARS = 4096
_LINE_CHARS = 1000


def _cells(*values) -> list[str]:
    return [printable(str(v), _CELL_CHARS) for v in values]


def device_usage(snapshot, device) -> tuple[int | None, int | None]:
    """(used, capacity) for a device: the driver's view first, else the publishers', else the allocator's."""
    if device.driver and device.driver.get("used_bytes") is not None:
        return device.driver["used_bytes"], device.driver.get("total_bytes")
    published = [p.used_bytes for p in snapshot.processes if p.device == device.key and p.source == "publisher" and p.used_bytes is not None]
    capacity = device.bytes_limit or device.hbm_bytes
    if published:
        return sum(published), capacity
    stats = device.memory_stats or {}
    return stats.get("bytes_in_use"), capacity


def snapshot_tables(snapshot, history: dict | None = None, peaks: dict | None = None) -> list:
    tables = []
    devices = data_table(title="devices")
    columns = ["device", "kind", "limit", "in use", "peak", "headroom", "driver used/total", "status"]
    if history is not None:
        columns[3:3] = ["usage", "history"]
    for col in columns:
        devices.add_column(col, overflow="fold")
    for d in snapshot.devices:
        stats = d.memory_stats or {}
        driver = f"{format_bytes(d.driver['used_bytes'])} / {format_bytes(d.driver['total_bytes'])}" if d.driver else "-"
        if d.hbm_bytes:
            driver = f"HBM {format_bytes(d.hbm_bytes)}"
        status = d.status if d.status != "held" else "held by " + ", ".join(f"pid {h['pid']}" for h in d.holders)
        row = [
            d.key, d.device_kind, format_bytes(d.bytes_limit), format_bytes(stats.get("bytes_in_use")),
            format_bytes(d.peak_bytes_in_use), format_bytes(d.headroom_bytes), driver, status,
        ]  # fmt: skip
        if history is not None:
            used, capacity = device_usage(snapshot, d)
            row[3:3] = [usage_bar(used, capacity, (peaks or {}).get(d.key)), sparkline(history.get(d.key, ()))]
        devices.add_row(*_cells(*row))
    tables.append(devices)

    if snapshot.processes:
        procs = data_table(title="processes")
        for col in ("pid", "source", "user", "device", "memory", "arrays", "headroom", "command"):
            procs.add_column(col, overflow="fold")
        for p in snapshot.processes:
            procs.add_row(*_cells(
                str(p.pid) + ("" if p.pid_visible else " (other pid ns)"), p.source, p.user or "-", p.device,
                format_bytes(p.used_bytes), "-" if p.live_arrays is None else str(p.live_arrays),
                format_bytes(p.headroom_bytes), p.command or "-",
            ))  # fmt: skip
        tables.append(procs)
    return tables


def summary_lines(snapshot) -> list[str]:
    h = snapshot.headroom
    lines = []
    if h.min_bytes is not None:
        lines.append(f"headroom: min {format_bytes(h.min_bytes)} at {h.where}; a third of it ({format_bytes(h.third_of_min_bytes)}) is a safe working-memory budget")
    else:
        lines.append(f"headroom: unknown ({h.reason})")
    m = snapshot.host
    lines.append(
        f"host: RAM {format_bytes(m.used_bytes)} used of {format_bytes(m.total_bytes)} ({format_bytes(m.available_bytes)} available), "
        f"swap {format_bytes(m.swap_used_bytes)} of {format_bytes(m.swap_total_bytes)}, /dev/shm {format_bytes(m.shm_used_bytes)} of {format_bytes(m.shm_total_bytes)}"
    )
    if any(d.source == "jax" for d in snapshot.devices):
        lines.append("limit: the allocator's bytes_limit, what a new JAX process would get on that device right now")
    lines += [f"note: {n}" for n in snapshot.notes]
    lines += [f"problem: {p}" for p in snapshot.problems]
    return [printable(line, _LINE_CHARS) for line in lines]


def render_snapshot(snapshot) -> None:
    console = out()
    for table in snapshot_tables(snapshot):
        console.print(table)
    for line in summary_lines(snapshot):
        console.print(line, markup=False, highlight=False)


def usage_bar(used: int | None, capacity: int | None, peak: int | None, width: int = 10) -> str:
    """`[#####-----|----] 35%`: filled to `used`, `|` at the peak seen."""
    if used is None:
        return "-"
    if not capacity:
        return format_bytes(used)
    filled = min(width, round(width * used / capacity))
    cells = ["#"] * filled + ["-"] * (width - filled)
    if peak is not None and peak > used:
        cells[min(width - 1, round(width * peak / capacity))] = "|"
    return "[" + "".join(cells) + f"] {100 * used / capacity:.0f}%"


def sparkline(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return ""
    top = max(values) or 1
    return "".join(_SPARK[min(len(_SPARK) - 1, int(len(_SPARK) * v / top))] if v else _SPARK[0] for v in values)


class WatchView:
    """Keeps the history behind the live view: the last samples per device and the peak seen."""

    def __init__(self, length: int = 16):
        self.history: dict[str, deque] = defaultdict(lambda: deque(maxlen=length))
        self.peaks: dict[str, int] = {}

    def add(self, snapshot) -> None:
        for d in snapshot.devices:
            used, _ = device_usage(snapshot, d)
            self.history[d.key].append(used)
            candidates = [v for v in (used, d.peak_bytes_in_use, self.peaks.get(d.key)) if v is not None]
            if candidates:
                self.peaks[d.key] = max(candidates)

    def renderable(self, snapshot, interval_s: float, sample_no: int):
        from rich.console import Group
        from rich.text import Text

        stamp = Text(f"devctl memstats --watch: sample {sample_no}, every {interval_s:g} s (Ctrl-C to stop)")
        tables = snapshot_tables(snapshot, self.history, self.peaks)
        return Group(stamp, *tables, *(Text(line) for line in summary_lines(snapshot)))
