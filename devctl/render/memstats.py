"""`devctl memstats` as tables, and the live `--watch` view (bars with the peak marked, sparklines, processes).

Narrow terminals: the device table keeps the device, its use and headroom; the kind every device shares
becomes one line above it, and the peak, limit and driver columns give way in that order (the live view's
bar marks the peak); in the live view the busy figures give way before their sparkline, which goes (with its
legend) before the memory history. A process's command goes on a line of its own under its row, once per
job. The live view also fits the window's height: the devices first, then problems and the headroom, then
what the busy history plots, then as many processes as fit (with a line saying how many more there are),
then the rest.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections import defaultdict, deque

from devctl.render.console import Column, print_lines, table_lines, wrap
from devctl.text import printable, program_name
from devctl.units import format_bytes

_SPARK = "▁▂▃▄▅▆▇█"
_NO_READING = "·"  # a sample that said nothing of the device (its only job exited, an NVML hiccup)
BUSY = "SM/TC/DRAM %"
BUSY_HISTORY = "busy history"  # the live view's sparkline of how busy each device was
# The live view's cells are as wide as these from the first frame, so a value that changes its width (0 B ->
# 530.0 MiB, a job's row coming and going) moves no column: the widest each format writes.
_LIVE_WIDTHS = {
    "usage": 15, "history": 12, BUSY_HISTORY: 16, "in use": 17, "peak": 10, "limit": 10, "free": 10, "usable": 10, "total": 10, BUSY: 11,
    "pid": 7, "memory": 10, "arrays": 6, "headroom": 10,
}  # fmt: skip
_HISTORY = 12  # samples the live view's sparkline shows
_BUSY_HISTORY = 16  # samples the live view's busy sparkline shows
# What each kind of busy figure is, in the live view's legend: the figure the busy column leads with.
_BUSY_FIGURES = {"gpm": "SM active % (GPM)", "nvml-utilization": "NVML utilization % (no GPM)", "tpu": "duty cycle % (TPU)"}
_LIVE_BAR = 8  # cells of the live view's usage bar
# Table cells and lines carry text other users and jobs wrote (command lines, snapshot fields, file
# names): every one goes through printable() so no escape sequence or newline reaches the terminal.
_CELL_CHARS = 4096
_LINE_CHARS = 1000
# A job whose exit the live view goes on showing: the last few, so one that went while nobody looked is seen.
_EXITS_KEPT = 3


def _cells(*values) -> list[str]:
    return [printable(str(v), _CELL_CHARS) for v in values]


def device_usage(snapshot, device) -> tuple[int | None, int | None]:
    """(used, capacity) for a device's bar: the driver's view first, else what the jobs hold of the allocator's
    limit (a CPU device's of the host's memory, where its arrays live)."""
    if device.driver and device.driver.get("used_bytes") is not None:
        return device.driver["used_bytes"], device.driver.get("total_bytes")
    if device.runtime is not None and device.runtime.hbm_used_bytes is not None:  # a TPU chip, by its holder's libtpu
        return device.runtime.hbm_used_bytes, device.runtime.hbm_total_bytes or device.hbm_bytes
    capacity = device.bytes_limit or device.hbm_bytes
    if capacity is None and device.platform == "cpu":
        capacity = snapshot.host.total_bytes
    return device.in_use_bytes, capacity


def busy_cell(device) -> str:
    """'64/63/13': GPM's SM, tensor and DRAM-bandwidth percentages; 'util 78': NVML's utilization (no GPM); '-'."""
    b = device.busy
    if b is None:
        return "-"
    if b.source != "gpm":
        return f"util {_percent(b.kernel_active_ratio)}"
    c = b.counters
    parts = (c.sm_active_ratio, c.tensor_active_ratio, c.dram_active_ratio)
    if all(v is None for v in parts) and b.mig:
        return f"MIG x{len(b.mig)}"  # each GPU instance's counters are in --json
    return "/".join(_percent(v) for v in parts)


def busy_figure(device) -> tuple[str, float | None] | None:
    """The figure the busy column leads with, in percent, and its kind: GPM's SM active ("gpm"), else NVML's
    utilization ("nvml-utilization"); a TPU chip's duty cycle by its holder's libtpu ("tpu"). (kind, None) where
    this sample gave none (a MIG GPU has no whole-GPU figure); None for a device with no busy-ness at all."""
    b = device.busy
    if b is not None:
        kind = "gpm" if b.source == "gpm" else "nvml-utilization"
        ratio = b.counters.sm_active_ratio if kind == "gpm" else b.kernel_active_ratio
        value = None if ratio is None else 100 * ratio
    elif device.runtime is not None:
        kind, value = "tpu", device.runtime.duty_cycle_percent
    else:
        return None
    return kind, value if value is not None and math.isfinite(value) else None


def busy_sparkline(percents, length: int = _BUSY_HISTORY) -> str:
    """One cell per sample, the newest on the right, `length` cells from the first sample: its height the
    percentage on one 0-100% scale (never scaled to the largest value shown, so rows compare at a glance); '·'
    for a sample without a figure; '-' where none of them had one (never a row of zeros)."""
    values = list(percents)[-length:]
    if all(v is None for v in values):
        return "-".rjust(length)
    return sparkline(values, 100, length)


def busy_history_legend(kinds, length: int = _BUSY_HISTORY) -> str:
    """'busy history: SM active % (GPM), last 16 samples, ▁ 0 to █ 100%, · no figure': one line at 80 columns."""
    figures = ", ".join(_BUSY_FIGURES[k] for k in _BUSY_FIGURES if k in kinds)
    return f"{BUSY_HISTORY}: {figures}, last {length} samples, {_SPARK[0]} 0 to {_SPARK[-1]} 100%, {_NO_READING} no figure"


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.0f}"


def busy_legend(snapshot) -> str | None:
    """What the busy column's figures are, for the devices that have them; None without any."""
    busy = [d.busy for d in snapshot.devices if d.busy is not None]
    if not busy:
        return None
    said = []
    windows = sorted({b.window_s for b in busy if b.source == "gpm" and b.window_s is not None})
    if any(b.source == "gpm" for b in busy):
        over = f" over {windows[0]:g} s" if len(windows) == 1 else ""
        said.append(f"share of SMs, tensor cores, DRAM bandwidth busy{over} (GPM)")
    if any(b.source != "gpm" for b in busy):
        said.append("util N: NVML utilization, a kernel was running N% of the time (no GPM on that GPU)")
    return f"{BUSY}: " + "; ".join(said)


def _in_use(d) -> str:
    """What is held on the device, and by whose account: the publishing jobs' or the driver's."""
    if d.in_use_bytes is None:
        if d.runtime is not None and d.runtime.hbm_used_bytes is not None:
            return f"{format_bytes(d.runtime.hbm_used_bytes)} libtpu"
        return "-"
    return f"{format_bytes(d.in_use_bytes)} {d.in_use_source}" if d.in_use_source else format_bytes(d.in_use_bytes)


def device_table(
    snapshot, history: dict | None = None, peaks: dict | None = None, busy: bool | None = None, busy_history: dict | None = None
) -> tuple[list[Column], list[list[str]]]:
    """The devices' columns and rows; with `history` (the live view) a usage bar and a sparkline, every cell
    as wide as its column's widest value can be, and no column goes under its row: a live view has no lines
    to spare. `busy`: a busy column (default: where a device has figures for it). `busy_history` (the live
    view's, device key -> its last busy percentages): a sparkline of them, before the busy column."""
    live = history is not None
    busy = any(d.busy is not None for d in snapshot.devices) if busy is None else busy
    columns = [
        Column("device"), Column("kind", priority=7), Column("in use", "right", priority=1),
        Column("peak", "right", priority=6, detail=not live), Column("limit", "right", priority=4, detail=not live),
        Column("free", "right", priority=5, detail=not live), Column("usable", "right", priority=2),
        Column("total", "right", priority=8, detail=not live), Column("status", priority=1, blank=("", "-", "ok")),
    ]  # fmt: skip
    if busy:
        columns.insert(3, Column(BUSY, "right", priority=2, short="busy", detail=not live))
    duty = any(d.runtime is not None for d in snapshot.devices)
    if duty:  # a TPU chip's duty cycle, from its holder's libtpu
        columns.append(Column("duty", "right", priority=2))
    if live:
        columns[2:2] = [Column("usage"), Column("history", priority=2, detail=False)]
        # Only what every row keeps saying may go above the table: a live value said once would go stale.
        columns = [dataclasses.replace(c, detail=False, hoist=c.header in ("kind", "total", "status"),
                                       priority={"status": 3, "in use": 0}.get(c.header, c.priority)) for c in columns]
        if busy_history is not None:
            # Beside the figures it plots, and before them: where the width runs short, the three figures give
            # way first and the history of the first stays (as the memory history stays where its figures go).
            spark_at = [c.header for c in columns].index("in use") + 1
            columns.insert(spark_at, Column(BUSY_HISTORY, priority=2, detail=False, hoist=False))
    rows = []
    for d in snapshot.devices:
        driver = d.driver or {}
        total = format_bytes(driver.get("total_bytes")) if d.driver else "-"
        if d.hbm_bytes or (d.runtime and d.runtime.hbm_total_bytes):
            total = f"HBM {format_bytes((d.runtime.hbm_total_bytes if d.runtime else None) or d.hbm_bytes)}"
        status = d.status if d.status != "held" else "held by " + ", ".join(f"pid {h['pid']}" for h in d.holders)
        row = [
            d.key, d.device_kind, _in_use(d), format_bytes(d.peak_bytes_in_use), format_bytes(d.bytes_limit),
            format_bytes(driver.get("free_bytes")), format_bytes(d.usable_bytes), total, status,
        ]  # fmt: skip
        if busy:
            row.insert(3, busy_cell(d))
        if duty:
            row.append(_duty(d))
        if live:
            used, capacity = device_usage(snapshot, d)
            row[2:2] = [usage_bar(used, capacity, (peaks or {}).get(d.key), _LIVE_BAR), sparkline((history or {}).get(d.key, ()), capacity, _HISTORY)]
            if busy_history is not None:
                row.insert(spark_at, busy_sparkline(busy_history.get(d.key, ())))
        rows.append(_cells(*row))
    return columns, _padded(columns, rows) if live else rows


def _duty(d) -> str:
    r = d.runtime
    if r is None or (r.duty_cycle_percent is None and r.tensorcore_utilization_percent is None):
        return "-"
    duty = "-" if r.duty_cycle_percent is None else f"{r.duty_cycle_percent:.0f}%"
    # libtpu.sdk's TensorCore utilization, where devctl has it: how much of the busy time did useful work
    return duty if r.tensorcore_utilization_percent is None else f"{duty} tc {r.tensorcore_utilization_percent:.0f}%"


def _padded(columns: list[Column], rows: list[list[str]]) -> list[list[str]]:
    """The live view's cells, each as wide as _LIVE_WIDTHS says for its column (wider values stay whole)."""
    out = []
    for row in rows:
        cells = []
        for c, v in zip(columns, row):
            w = _LIVE_WIDTHS.get(c.header, 0)
            cells.append(v.rjust(w) if c.justify == "right" else v.ljust(w))
        out.append(cells)
    return out


def process_table(snapshot, exited: list | None = None) -> tuple[list[Column], list[list[str]]]:
    """The processes' columns and rows; with `exited` (the live view: (row, "exited" or "stopped") for each row of
    a job gone since), those rows too, said so in the memory column, and every cell as wide as its column can be."""
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
    if exited is None:
        return columns, rows
    for p, word in exited:
        rows.append(_cells(str(p.pid), p.source, p.user or "-", p.device, word, "-", "-", program_name(p.command) if p.command else "-"))
    columns = [dataclasses.replace(c, hoist=False) for c in columns]  # rows come and go: nothing is said once for all
    return columns, _padded(columns, rows)


def summary_lines(snapshot) -> list[str]:
    lines = [headroom_line(snapshot)]
    m = snapshot.host
    lines.append(
        f"host: RAM {format_bytes(m.used_bytes)} used of {format_bytes(m.total_bytes)} ({format_bytes(m.available_bytes)} available), "
        f"swap {format_bytes(m.swap_used_bytes)} of {format_bytes(m.swap_total_bytes)}, /dev/shm {format_bytes(m.shm_used_bytes)} of {format_bytes(m.shm_total_bytes)}"
    )
    if any(d.usable_bytes is not None for d in snapshot.devices):
        lines.append("usable: what a new JAX process can allocate now, the smaller of the allocator's limit and the driver's free memory")
    legend = busy_legend(snapshot)
    if legend is not None:
        lines.append(legend)
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
        "driver_total_bytes", "hbm_bytes", "status", "busy_source", "busy_window_s", "sm_active_ratio", "tensor_active_ratio",
        "dram_active_ratio", "kernel_active_ratio", "tpu_hbm_used_bytes", "tpu_hbm_total_bytes", "tpu_duty_cycle_percent",
    ]  # fmt: skip
    rows = []
    for d in snapshot.devices:
        driver = d.driver or {}
        rows.append([
            round(snapshot.timestamp, 3), snapshot.hostname, d.key, d.source, d.platform, d.id, d.device_kind, d.in_use_bytes,
            d.in_use_source, d.peak_bytes_in_use, d.bytes_limit, driver.get("free_bytes"), d.usable_bytes, d.usable_bound,
            driver.get("used_bytes"), driver.get("total_bytes"), d.hbm_bytes, d.status, *_busy_csv(d.busy),
            *((d.runtime.hbm_used_bytes, d.runtime.hbm_total_bytes, d.runtime.duty_cycle_percent) if d.runtime else (None, None, None)),
        ])  # fmt: skip
    return header, rows


def _busy_csv(b) -> list:
    if b is None:
        return [None] * 6
    c = b.counters
    return [b.source, b.window_s, c.sm_active_ratio, c.tensor_active_ratio, c.dram_active_ratio, b.kernel_active_ratio]


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


def sparkline(values, capacity: int | None = None, length: int | None = None) -> str:
    """One cell per sample, the newest on the right: its height the share of `capacity` in use (of the largest
    value shown where the capacity is unknown); '·' for a sample that said nothing. With `length`, always that
    many cells, blank on the left until that many samples were taken."""
    values = list(values)[-length:] if length else list(values)
    top = capacity or max((v for v in values if v), default=0) or 1
    cells = "".join(_NO_READING if v is None else _SPARK[min(len(_SPARK) - 1, max(0, int(len(_SPARK) * v / top)))] for v in values)
    return cells.rjust(length) if length else cells


class WatchView:
    """Keeps what the live view shows across samples: the last samples per device (its memory in use, how busy
    it was), the peak seen, the jobs that exited, and the layout of the first frame, kept while the terminal's
    size is the same. Every history is bounded: a device's holds its last samples, and a device gone from the
    samples is forgotten once none of its last samples had a figure."""

    def __init__(self, length: int = _HISTORY, busy_length: int = _BUSY_HISTORY):
        self.history: dict[str, deque] = defaultdict(lambda: deque(maxlen=length))
        self.busy_length = busy_length
        # device key -> its last samples' busy_figure: (kind, percent), None where the sample had none of it
        self.busy_history: dict[str, deque[tuple[str, float | None] | None]] = {}
        self.busy_kinds: set[str] = set()  # the kinds of busy figure seen; the sparkline is shown from the first on
        self.peaks: dict[str, int] = {}
        self.exits: deque[str] = deque(maxlen=_EXITS_KEPT)
        self.earlier_exits: list[str] = []  # jobs that exited before the latest sample, still shown
        self.busy: bool | None = None  # the busy column: decided by the first sample, kept
        self.jobs: dict[int, list] = {}  # the publishing jobs' rows of the last sample, by pid
        # (pid, [(its last rows, "exited" or "stopped")]): jobs gone since, whose rows stay, said so
        self.exited: deque[tuple[int, list]] = deque(maxlen=_EXITS_KEPT)
        self.size: tuple[int, int] | None = None  # the terminal's when the layouts were made
        self.layouts: dict[str, dict] = {}  # per table: the first frame's layout (console.table_lines' keep)

    def add(self, snapshot) -> None:
        self.earlier_exits = list(self.exits)
        self.exits.extend(p for p in snapshot.problems if _is_exit(p))
        if self.busy is None:
            self.busy = any(d.busy is not None for d in snapshot.devices)
        self._add_busy(snapshot)
        # As the busy history: a device missing from this sample gets a gap, and is forgotten (its peak too) once
        # its history holds no figure, so a long watch over devices that come and go stays bounded.
        present = {d.key for d in snapshot.devices}
        for key in [k for k in self.history if k not in present]:
            self.history[key].append(None)
            if all(v is None for v in self.history[key]):
                del self.history[key]
                self.peaks.pop(key, None)
        for d in snapshot.devices:
            used, _ = device_usage(snapshot, d)
            self.history[d.key].append(used)
            candidates = [v for v in (used, d.peak_bytes_in_use, self.peaks.get(d.key)) if v is not None]
            if candidates:
                self.peaks[d.key] = max(candidates)
        jobs: dict[int, list] = defaultdict(list)
        for p in snapshot.processes:
            if p.source == "publisher":
                jobs[p.pid].append(p)
        gone = {int(m.group(1)): "exited" if e.endswith(" exited") else "stopped" for e in snapshot.problems if _is_exit(e) and (m := _EXIT_PID.match(e))}
        for pid in self.jobs.keys() - jobs.keys():
            if pid in gone:
                self.exited.append((pid, [(p, gone[pid]) for p in self.jobs[pid]]))
        # A job first seen to stop publishing, then to exit: its rows say so now.
        self.exited = deque(((pid, [(p, gone.get(pid, word)) for p, word in rows]) for pid, rows in self.exited), maxlen=_EXITS_KEPT)
        self.exited = deque(((pid, rows) for pid, rows in self.exited if pid not in jobs), maxlen=_EXITS_KEPT)
        self.jobs = dict(jobs)

    def _add_busy(self, snapshot) -> None:
        figures = {d.key: busy_figure(d) for d in snapshot.devices}
        self.busy_kinds.update(lead[0] for lead in figures.values() if lead is not None)
        # A device missing from this sample (a GPU lost, a filter's device gone): a gap in its history, which
        # shows if it comes back; forgotten once its history holds no figure, so the keys stay bounded too.
        for key in [k for k in self.busy_history if k not in figures]:
            self.busy_history[key].append(None)
            if all(e is None or e[1] is None for e in self.busy_history[key]):
                del self.busy_history[key]
        for key, lead in figures.items():
            self.busy_history.setdefault(key, deque(maxlen=self.busy_length)).append(lead)

    def busy_rows(self) -> tuple[dict[str, list[float | None]], set[str]]:
        """Each device's percentages to plot, and the kinds of figure they are. A row plots one measure: that of
        its newest figure; a sample of another (a GPM GPU whose GPM gave nothing once, so its busy column fell back
        to NVML's utilization, a higher figure) is a gap in it, not a jump."""
        rows: dict[str, list[float | None]] = {}
        kinds: set[str] = set()
        for key, entries in self.busy_history.items():
            kind = next((e[0] for e in reversed(entries) if e is not None and e[1] is not None), None)
            rows[key] = [e[1] if e is not None and e[0] == kind else None for e in entries]
            if kind is not None:
                kinds.add(kind)
        return rows, kinds

    def renderable(self, snapshot, interval_s: float, sample_no: int, *, width: int | None = None, height: int | None = None):
        """The view as one rich renderable that fits `width` x `height` (the terminal's by default)."""
        from rich.console import Group

        from devctl.render.console import out

        size = out().size
        return Group(*self.lines(snapshot, interval_s, sample_no, width or size.width, height or size.height))

    def lines(self, snapshot, interval_s: float, sample_no: int, width: int, height: int) -> list:
        """The live view's lines, at most `height` - 1 of them (the last line of the window holds the cursor): a
        head line, the devices, as many processes as fit (with a line saying how many more there are), and a
        footer of at most two lines (the headroom; the latest problem, else the host's memory)."""
        from rich.text import Text

        if self.size != (width, height):
            self.size, self.layouts = (width, height), {"devices": {}, "processes": {}}
        room = max(height - 1, 1)
        head = [Text(line) for line in wrap(
            f"devctl memstats --watch: sample {sample_no} at {stamp(snapshot.timestamp)[11:]}, every {interval_s:g} s (Ctrl-C to stop)",
            width, hang="  ")]  # fmt: skip
        footer = [Text(line) for line in self.footer(snapshot, width)]
        spark, plotted = self.busy_rows() if self.busy_kinds else (None, set())
        columns, rows = device_table(snapshot, self.history, self.peaks, busy=bool(self.busy), busy_history=spark)
        devices = _table_within(columns, rows, "devices", width, room - len(head), "devices", self.layouts["devices"])
        room -= len(head) + len(devices)
        footer = footer[: max(room, 0)]
        room -= len(footer)
        legend: list = []
        fit = self.layouts["devices"].get("fit")
        if spark is not None and fit is not None and fit.placement[[c.header for c in columns].index(BUSY_HISTORY)] == "table":
            # What the sparkline plots, said where it is shown (a narrow window drops the column, and this with it).
            legend = _wrapped(busy_history_legend(plotted or self.busy_kinds, self.busy_length), width)
            legend = legend if len(legend) <= room else []
            room -= len(legend)
        processes: list = []
        exited = [p for _, rows in self.exited for p in rows]
        if (snapshot.processes or exited) and room > 0:
            columns, rows = process_table(snapshot, exited)
            processes = _table_within(columns, rows, "processes", width, room, "processes", self.layouts["processes"])
        return head + devices + legend + processes + footer

    def footer(self, snapshot, width: int) -> list[str]:
        """At most two lines, each cut to `width`: the headroom, and the most pressing problem (with how many
        more there are), else the host's memory."""
        h = snapshot.headroom
        if h.min_bytes is None:
            first = f"headroom: unknown ({h.reason})"
        else:
            what = {"job": "what that job can still allocate", "driver": "the driver's free memory"}.get(h.bound or "", "a new JAX process's limit")
            first = f"headroom: min {format_bytes(h.min_bytes)} (a third: {format_bytes(h.third_of_min_bytes)}) at {h.where}, {what}"
        problems = list(snapshot.problems) + [leak_line(leak) for leak in snapshot.leaks]
        problems += [f"{e} (earlier)" for e in self.earlier_exits if e not in snapshot.problems]
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            second = f"problem: {problems[0]}"
            second = _cut(second, width - len(more)) + more
        else:
            m = snapshot.host
            second = f"host: RAM {format_bytes(m.used_bytes)} used of {format_bytes(m.total_bytes)}, /dev/shm {format_bytes(m.shm_used_bytes)} used"
        return [_cut(printable(first, _LINE_CHARS), width), _cut(printable(second, _LINE_CHARS), width)]


def _cut(line: str, width: int) -> str:
    """`line` cut to `width` cells, with '…' where it was cut."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(line) <= width:
        return line
    return set_cell_size(line, max(width - 1, 0)).rstrip() + "…"


_EXIT_PID = re.compile(r"job (\d+) ")


def _is_exit(problem: str) -> bool:
    return problem.startswith("job ") and (problem.endswith(" exited") or problem.endswith("(its last snapshot is stale)"))


def _table_within(columns: list[Column], rows: list[list[str]], title: str, width: int, room: int, noun: str, keep: dict | None = None) -> list:
    """The table in at most `room` lines: all of it, or its first rows and a line saying how many more there are."""
    from rich.text import Text

    lines = table_lines(columns, rows, title=title, width=width, keep=keep)
    if len(lines) <= room:
        return lines
    for shown in range(len(rows) - 1, 0, -1):
        lines = table_lines(columns, rows, title=title, width=width, rows_shown=shown, keep=keep)
        more = [Text(line) for line in wrap(f"… {len(rows) - shown} more {noun} (a taller window shows them)", width, hang="  ")]
        if len(lines) + len(more) <= room:
            return lines + more
    summary = f"{noun}: {len(rows)} (a taller window shows them)"
    return [Text(line) for line in wrap(summary, width, hang="  ")][: max(room, 0)]
