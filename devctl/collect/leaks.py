"""Leak watch for `devctl memstats --watch`: a publishing job whose live arrays grow sample after sample without
ever falling back is named, with the lines of its program whose arrays grew.

Each job's totals (live arrays and their bytes, over its devices) are kept for the last `window` samples. A job
is a suspect when each of those samples is at least the one before and the last is above the first, in arrays or
in bytes: a training step that frees what it allocates comes back down within a few samples, a leak does not.
Halfway into a rising streak devctl asks the job for its arrays by line (`--top`, through its private directory),
and again when the streak is complete: the lines whose totals grew in between are named.
"""

from __future__ import annotations

from typing import Callable

from devctl.model.memstats import Leak, SiteGrowth

DEFAULT_WINDOW = 10


class LeakWatch:
    def __init__(self, window: int = DEFAULT_WINDOW, ask_sites: Callable[[int], dict | None] | None = None):
        self.window = window
        self.ask_sites = ask_sites or _ask_sites  # pid -> {site: (arrays, bytes)}, None when the job did not answer
        self.history: dict[int, list[tuple[int, int]]] = {}
        self.before: dict[int, dict | None] = {}
        self.flagged: dict[int, Leak] = {}

    def update(self, publishers) -> list[Leak]:
        seen = set()
        leaks = []
        for p in publishers:
            seen.add(p.pid)
            totals = (sum(d.live_arrays for d in p.devices), sum(d.live_bytes for d in p.devices))
            history = self.history.setdefault(p.pid, [])
            history.append(totals)
            del history[: -self.window]
            streak = _rising_streak(history)
            if streak < len(history) or len(history) < self.window:
                self.flagged.pop(p.pid, None)
                if streak == (self.window + 1) // 2:
                    self.before[p.pid] = self.ask_sites(p.pid)  # halfway: where the arrays are now
                if streak <= 1:
                    self.before.pop(p.pid, None)
                continue
            first, last = history[0], history[-1]
            if last == first:
                continue  # flat: not growing
            leak = self.flagged.get(p.pid)
            if leak is None or (leak.arrays_to, leak.bytes_to) != last:
                leak = self._leak(p, first, last)
                self.flagged[p.pid] = leak
            leaks.append(leak)
        for pid in set(self.history) - seen:  # the job is gone
            self.history.pop(pid, None)
            self.before.pop(pid, None)
            self.flagged.pop(pid, None)
        return leaks

    def _leak(self, p, first: tuple[int, int], last: tuple[int, int]) -> Leak:
        from devctl.text import printable

        before = self.before.get(p.pid)
        after = self.ask_sites(p.pid)
        growing: list[SiteGrowth] = []
        note = None
        if before is None or after is None:
            note = "the job did not say where its arrays are (it answers --top requests within one publish interval)"
        else:
            for site, (arrays, nbytes) in after.items():
                was = before.get(site, (0, 0))
                if nbytes > was[1]:
                    growing.append(SiteGrowth(site, arrays - was[0], nbytes - was[1]))
            growing.sort(key=lambda g: -g.nbytes)
            if not growing:
                note = "no line's arrays grew between the two questions: the growth is in arrays devctl does not see by line"
        self.before[p.pid] = after
        return Leak(
            p.pid, printable(" ".join(p.command), 120) or "?", self.window, first[0], last[0], first[1], last[1], growing[:5], note,
        )  # fmt: skip


def _rising_streak(history: list[tuple[int, int]]) -> int:
    """How many of the last samples never fell (in arrays or bytes) from one to the next."""
    n = 1
    for prev, cur in zip(reversed(history[:-1]), reversed(history[1:])):
        if cur[0] < prev[0] or cur[1] < prev[1]:
            break
        n += 1
    return n


def _ask_sites(pid: int) -> dict | None:
    from devctl.discovery.holders import request_top
    from devctl.errors import DevctlError

    try:
        report, _ = request_top(pid, 1, pprof=False, timeout_s=3.0)
    except DevctlError:
        return None
    return {s.site: (s.arrays, s.nbytes) for s in report.sites}
