"""`devctl memstats` as tables, and the live `--watch` view (bars with the peak marked, sparklines, processes).

Narrow terminals: the device table keeps the device, its use and headroom; the kind every device shares
becomes one line above it, and the peak, limit and driver columns give way in that order (the live view's
bar marks the peak). A process's command goes on a line of its own under its row, once per job. The live
view also fits the window's height: the devices first, then problems and the headroom, then as many
processes as fit (with a line saying how many more there are), then the rest.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque

from devctl.render.console import Column, print_lines, table_lines, wrap
from devctl.text import printable, program_name
from devctl.units import format_bytes

_SPARK = "▁▂▃▄▅▆▇█"
# Table cells and lines carry text other users and jobs wrote (command lines, snapshot fields, file
# names): every one goes through printable() so no escape sequence or newline reaches the terminal.
_CELL_CHARS = 4096
_LINE_CHARS = 1000
# A job whose exit the live view goes on showing: the last few, so one that went while nobody looked is seen.
_EXITS_KEPT = 3


def _cells(*values) -> list[str]:
    return [printable(str(v), _CELL_CHARS) for v in values]


def device_usage(snapshot, device) -> tuple[int | None, int | None]:
    """(used, capacity) for a device's bar: the driver's view first, else what the jobs hold of the allocator's limit."""
    if device.driver and device.driver.get("used_bytes") is not None:
        return device.driver["used_bytes"], device.driver.get("total_bytes")
    return device.in_use_bytes, device.bytes_limit or device.hbm_bytes


def _in_use(d) -> str:
    """What is held on the device, and by whose account: the publishing jobs' or the driver's."""
    if d.in_use_bytes is None:
        return "-"
    return f"{format_bytes(d.in_use_bytes)} {d.in_use_source}" if d.in_use_source else format_bytes(d.in_use_bytes)


def device_table(snapshot, history: dict | None = None, peaks: dict | None = None) -> tuple[list[Column], list[list[str]]]:
    """The devices' columns and rows; with `history` (the live view) a usage bar and a sparkline, and no
    column goes under its row: a live view has no lines to spare."""
    live = history is not None
    columns = [
        Column("device"), Column("kind", priority=7), Column("in use", "right", priority=1),
        Column("peak", "right", priority=6 if live else 3, detail=not live), Column("limit", "right", priority=4, detail=not live),
        Column("free", "right", priority=5, detail=not live), Column("usable", "right", priority=2),
        Column("total", "right", priority=8, detail=not live), Column("status", priority=1, blank=("", "-", "ok")),
    ]  # fmt: skip
    if live:
        columns[2:2] = [Column("usage"), Column("history", priority=3, detail=False)]
    rows = []
    for d in snapshot.devices:
        driver = d.driver or {}
        total = format_bytes(driver.get("total_bytes")) if d.driver else "-"
        if d.hbm_bytes:
            total = f"HBM {format_bytes(d.hbm_bytes)}"
        status = d.status if d.status != "held" else "held by " + ", ".join(f"pid {h['pid']}" for h in d.holders)
        row = [
            d.key, d.device_kind, _in_use(d), format_bytes(d.peak_bytes_in_use), format_bytes(d.bytes_limit),
            format_bytes(driver.get("free_bytes")), format_bytes(d.usable_bytes), total, status,
        ]  # fmt: skip
        if live:
            used, capacity = device_usage(snapshot, d)
            row[2:2] = [usage_bar(used, capacity, (peaks or {}).get(d.key)), sparkline((history or {}).get(d.key, ()))]
        rows.append(_cells(*row))
    return columns, rows


def process_table(snapshot) -> tuple[list[Column], list[list[str]]]:
    columns = [
        Column("pid", "right"), Column("source", priority=3), Column("user", priority=2), Column("device"),
        Column("memory", "right"), Column("arrays", "right", priority=4), Column("headroom", "right", priority=5),
        Column("command", priority=6, once=True),
    ]  # fmt: skip
    rows = []
    for p in snapshot.processes:
        command = program_name(p.command) if p.command else "-"  # the full command line stays in --json
        if not p.pid_visible:
            command = "(a pid in another pid namespace: user and command unknown)"
        rows.append(_cells(
            str(p.pid), p.source, p.user or "-", p.device, format_bytes(p.used_bytes),
            "-" if p.live_arrays is None else str(p.live_arrays), format_bytes(p.headroom_bytes), command,
        ))  # fmt: skip
    return columns, rows


def summary_lines(snapshot) -> list[str]:
    lines = [headroom_line(snapshot)]
    m = snapshot.host
    lines.append(
        f"host: RAM {format_bytes(m.used_bytes)} used of {format_bytes(m.total_bytes)} ({format_bytes(m.available_bytes)} available), "
        f"swap {format_bytes(m.swap_used_bytes)} of {format_bytes(m.swap_total_bytes)}, /dev/shm {format_bytes(m.shm_used_bytes)} of {format_bytes(m.shm_total_bytes)}"
    )
    if any(d.usable_bytes is not None for d in snapshot.devices):
        lines.append("usable: what a new JAX process can allocate now, the smaller of the allocator's limit and the driver's free memory")
    lines += [f"note: {n}" for n in snapshot.notes]
    lines += [f"problem: {p}" for p in snapshot.problems]
    lines += [f"problem: {leak_line(leak)}" for leak in snapshot.leaks]
    return [printable(line, _LINE_CHARS) for line in lines]


def headroom_line(snapshot) -> str:
    """'headroom: min 34.4 GiB at gpu:0, the driver's free memory (the allocator would give 104.9 GiB; pid 2392 holds
    106.0 GiB, python train.py); a third of it (11.5 GiB) is a safe working-memory budget'."""
    h = snapshot.headroom
    if h.min_bytes is None:
        return f"headroom: unknown ({h.reason})"
    budget = f"a third of it ({format_bytes(h.third_of_min_bytes)}) is a safe working-memory budget"
    if h.bound == "driver":
        device = next((d for d in snapshot.devices if d.key == h.where), None)
        limit = f"the allocator would give {format_bytes(device.bytes_limit)}" if device and device.bytes_limit is not None else "the allocator reports no limit"
        holders = holders_of(snapshot, h.where)
        return f"headroom: min {format_bytes(h.min_bytes)} at {h.where}, the driver's free memory ({limit}{'; ' + holders if holders else ''}); {budget}"
    if h.bound == "job":
        return f"headroom: min {format_bytes(h.min_bytes)} at {h.where}, what that job can still allocate (its limit less its peak); {budget}"
    return f"headroom: min {format_bytes(h.min_bytes)} at {h.where}, the allocator's limit for a new JAX process; {budget}"


def holders_of(snapshot, key: str | None, most: int = 3) -> str:
    """Who holds a device's memory, by the driver's account, largest first: 'pid 2392 (root) holds 106.0 GiB: python
    train.py'; '' when the driver names nobody (another container's processes are named only by pid)."""
    procs = sorted((p for p in snapshot.processes if p.source == "nvml" and p.device == key), key=lambda p: -(p.used_bytes or 0))
    said = []
    for p in procs[:most]:
        who = f"pid {p.pid}" + (f" ({p.user})" if p.user else "")
        what = f": {program_name(p.command)}" if p.command and p.pid_visible else ""
        said.append(f"{who} holds {format_bytes(p.used_bytes)}{what}")
    if len(procs) > most:
        said.append(f"{len(procs) - most} more")
    return "; ".join(said)


def leak_line(leak) -> str:
    """'job 42 (train.py) may leak: live arrays 120 -> 180, 1.2 GiB -> 1.8 GiB over 10 samples, never falling; growing
    at train.py:88 (+60 arrays, +600.0 MiB)'."""
    grew = f"job {leak.pid} ({program_name(leak.command)}) may leak: live arrays {leak.arrays_from} -> {leak.arrays_to}, " \
           f"{format_bytes(leak.bytes_from)} -> {format_bytes(leak.bytes_to)} over {leak.samples} samples, never falling"
    if leak.growing_sites:
        sites = "; ".join(f"{g.site or '(no traceback)'} ({g.arrays:+d} {'array' if abs(g.arrays) == 1 else 'arrays'}, +{format_bytes(g.nbytes)})" for g in leak.growing_sites[:3])
        return f"{grew}; growing at {sites}"
    return f"{grew}; {leak.sites_note}" if leak.sites_note else grew


def _wrapped(line: str, width: int) -> list:
    """A `label: text` line wrapped under its text."""
    from rich.text import Text

    label, sep, _ = line.partition(": ")
    hang = " " * (len(label) + 2) if sep and len(label) < 12 else "  "
    return [Text(part) for part in wrap(line, width, hang=hang)]


def snapshot_lines(snapshot, width: int) -> list:
    lines = table_lines(*device_table(snapshot), title="devices", width=width)
    if snapshot.processes:
        lines += table_lines(*process_table(snapshot), title="processes", width=width)
    for line in summary_lines(snapshot):
        lines += _wrapped(line, width)
    return lines


def render_snapshot(snapshot) -> None:
    from devctl.render.console import out

    print_lines(snapshot_lines(snapshot, out().width))


def stamp(timestamp: float) -> str:
    """A sample's time as people read it in a log: local date and time to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def csv_rows(snapshot) -> tuple[list[str], list[list]]:
    """One row per device, raw values (bytes as integers, the time as Unix seconds): a `--watch --csv` log
    repeats them for every sample under one header."""
    header = [
        "timestamp", "hostname", "device", "source", "platform", "id", "kind", "in_use_bytes", "in_use_source",
        "peak_bytes_in_use", "bytes_limit", "driver_free_bytes", "usable_bytes", "usable_bound", "driver_used_bytes",
        "driver_total_bytes", "hbm_bytes", "status",
    ]  # fmt: skip
    rows = []
    for d in snapshot.devices:
        driver = d.driver or {}
        rows.append([
            round(snapshot.timestamp, 3), snapshot.hostname, d.key, d.source, d.platform, d.id, d.device_kind, d.in_use_bytes,
            d.in_use_source, d.peak_bytes_in_use, d.bytes_limit, driver.get("free_bytes"), d.usable_bytes, d.usable_bound,
            driver.get("used_bytes"), driver.get("total_bytes"), d.hbm_bytes, d.status,
        ])  # fmt: skip
    return header, rows


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
    """Keeps the history behind the live view: the last samples per device, the peak seen, and the jobs that exited."""

    def __init__(self, length: int = 16):
        self.history: dict[str, deque] = defaultdict(lambda: deque(maxlen=length))
        self.peaks: dict[str, int] = {}
        self.exits: deque[str] = deque(maxlen=_EXITS_KEPT)
        self.earlier_exits: list[str] = []  # jobs that exited before the latest sample, still shown

    def add(self, snapshot) -> None:
        self.earlier_exits = list(self.exits)
        self.exits.extend(p for p in snapshot.problems if _is_exit(p))
        for d in snapshot.devices:
            used, _ = device_usage(snapshot, d)
            self.history[d.key].append(used)
            candidates = [v for v in (used, d.peak_bytes_in_use, self.peaks.get(d.key)) if v is not None]
            if candidates:
                self.peaks[d.key] = max(candidates)

    def renderable(self, snapshot, interval_s: float, sample_no: int, *, width: int | None = None, height: int | None = None):
        """The view as one rich renderable that fits `width` x `height` (the terminal's by default)."""
        from rich.console import Group

        from devctl.render.console import out

        size = out().size
        return Group(*self.lines(snapshot, interval_s, sample_no, width or size.width, height or size.height))

    def lines(self, snapshot, interval_s: float, sample_no: int, width: int, height: int) -> list:
        """The live view's lines, at most `height` - 1 of them (the last line of the window holds the cursor):
        what does not fit gives way from the bottom of the list of what matters, never cut mid-table."""
        from rich.text import Text

        room = max(height - 1, 1)
        head = [Text(line) for line in wrap(
            f"devctl memstats --watch: sample {sample_no} at {stamp(snapshot.timestamp)[11:]}, every {interval_s:g} s (Ctrl-C to stop)",
            width, hang="  ")]  # fmt: skip
        columns, rows = device_table(snapshot, self.history, self.peaks)
        devices = _table_within(columns, rows, "devices", width, room - len(head), "devices")
        room -= len(head) + len(devices)

        summary = summary_lines(snapshot) + [printable(f"problem: {e} (earlier)", _LINE_CHARS) for e in self.earlier_exits]
        # What matters most when the window is short: problems, then the headroom; the rest after the processes.
        ranked = sorted(range(len(summary)), key=lambda i: 0 if summary[i].startswith("problem:") else 1 if summary[i].startswith("headroom:") else 3)
        chosen: dict[int, list] = {}
        for i in ranked:
            if not summary[i].startswith(("problem:", "headroom:")):
                break
            block = _wrapped(summary[i], width)
            if len(block) <= room:
                chosen[i] = block
                room -= len(block)
        processes: list = []
        if snapshot.processes and room > 0:
            columns, rows = process_table(snapshot)
            processes = _table_within(columns, rows, "processes", width, room, "processes")
            room -= len(processes)
        for i in ranked:
            if i in chosen:
                continue
            block = _wrapped(summary[i], width)
            if len(block) <= room:
                chosen[i] = block
                room -= len(block)
        body = [line for i in sorted(chosen) for line in chosen[i]]
        return head + devices + processes + body


def _is_exit(problem: str) -> bool:
    return problem.startswith("job ") and (problem.endswith(" exited") or problem.endswith("(its last snapshot is stale)"))


def _table_within(columns: list[Column], rows: list[list[str]], title: str, width: int, room: int, noun: str) -> list:
    """The table in at most `room` lines: all of it, or its first rows and a line saying how many more there are."""
    from rich.text import Text

    lines = table_lines(columns, rows, title=title, width=width)
    if len(lines) <= room:
        return lines
    for shown in range(len(rows) - 1, 0, -1):
        lines = table_lines(columns, rows, title=title, width=width, rows_shown=shown)
        more = [Text(line) for line in wrap(f"… {len(rows) - shown} more {noun} (a taller window shows them)", width, hang="  ")]
        if len(lines) + len(more) <= room:
            return lines + more
    summary = f"{noun}: {len(rows)} (a taller window shows them)"
    return [Text(line) for line in wrap(summary, width, hang="  ")][: max(room, 0)]
