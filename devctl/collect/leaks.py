"""Leak watch for `devctl memstats --watch`: a publishing job whose live arrays grow sample after sample without
ever falling back is named, with the lines of its program whose arrays grew.

Each job's totals (live arrays and their bytes, over its devices) are kept for the last `window` samples. A job
is a suspect when each of those samples is at least the one before and the last is above the first, in arrays or
in bytes: a training step that frees what it allocates comes back down within a few samples, a leak does not.
Halfway into a rising streak devctl asks the job for its arrays by line (`--top`, through its private directory),
and again while the streak goes on: the lines whose totals grew between two answers are named.

The questions never hold up a sample: each is asked in a thread of its own (at most MAX_QUESTIONS at once, one
per job), a sample waits at most ASK_WAIT_S for those in flight, and an answer that comes later is used by the
sample after it. A job that let its last question go unanswered (stuck in a call that holds the GIL, an older
devctl) is said so on its leak line and not waited for again until it answers. Four stuck jobs asked one after
the other with a 3 s wait each made samples arrive 12 s apart instead of every interval.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from devctl.model.memstats import Leak, SiteGrowth

DEFAULT_WINDOW = 10
ASK_TIMEOUT_S = 3.0  # how long one question waits for the job's answer, in its own thread
ASK_WAIT_S = 0.25  # how long one sample waits for the questions in flight to jobs that answered their last one
MAX_QUESTIONS = 8  # questions in flight at once, over every job

_NO_ANSWER = f"the job did not say where its arrays are (no answer to --top within {ASK_TIMEOUT_S:g} s; it answers within one publish interval)"
_ASKING = "asking the job where its arrays are (it answers --top requests within one publish interval)"
_NO_GROWTH = "no line's arrays grew between the two questions: the growth is in arrays devctl does not see by line"

Sites = dict  # {site: (arrays, bytes)}


class _Question:
    """One `--top` question to one job, asked in a daemon thread (an exit never waits for it)."""

    def __init__(self, pid: int, ask: Callable[[int], Sites | None]) -> None:
        self.done = threading.Event()
        self.sites: Sites | None = None
        threading.Thread(target=self._run, args=(pid, ask), name=f"devctl-leak-ask-{pid}", daemon=True).start()

    def _run(self, pid: int, ask: Callable[[int], Sites | None]) -> None:
        try:
            self.sites = ask(pid)
        except Exception:  # noqa: BLE001 - a question that failed is a job that did not say
            self.sites = None
        finally:
            self.done.set()


class LeakWatch:
    def __init__(
        self, window: int = DEFAULT_WINDOW, ask_sites: Callable[[int], Sites | None] | None = None, *,
        wait_s: float = ASK_WAIT_S, max_questions: int = MAX_QUESTIONS,
    ):  # fmt: skip
        self.window = window
        self.ask_sites = ask_sites or _ask_sites  # pid -> {site: (arrays, bytes)}, None when the job did not answer
        self.wait_s = wait_s
        self.max_questions = max_questions
        self.history: dict[int, list[tuple[int, int]]] = {}
        self.before: dict[int, Sites] = {}  # the job's last answer: what the next one is compared with
        self.growth: dict[int, tuple[list[SiteGrowth], str | None]] = {}  # what the last two answers showed
        self.questions: dict[int, _Question] = {}  # in flight, at most one per job
        self.silent: set[int] = set()  # jobs whose last question went unanswered: not waited for
        self.flagged: dict[int, Leak] = {}

    def update(self, publishers) -> list[Leak]:
        seen = set()
        suspects = []
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
                    self._ask(p.pid)  # halfway: where the arrays are now
                if streak <= 1:
                    self.before.pop(p.pid, None)
                    self.growth.pop(p.pid, None)
                continue
            first, last = history[0], history[-1]
            if last == first:
                continue  # flat: not growing
            leak = self.flagged.get(p.pid)
            if leak is None or (leak.arrays_to, leak.bytes_to) != last:
                self._ask(p.pid)  # grown since: where now
            suspects.append((p, first, last))
        for pid in set(self.history) - seen:  # the job is gone
            for state in (self.history, self.before, self.growth, self.questions, self.flagged):
                state.pop(pid, None)
            self.silent.discard(pid)
        self._collect()
        leaks = []
        for p, first, last in suspects:
            leak = self._leak(p, first, last)
            self.flagged[p.pid] = leak
            leaks.append(leak)
        return leaks

    def _ask(self, pid: int) -> None:
        """Start a question to job `pid`, unless one is in flight to it or MAX_QUESTIONS are (the next sample
        asks again)."""
        if pid in self.questions or len(self.questions) >= self.max_questions:
            return
        self.questions[pid] = _Question(pid, self.ask_sites)

    def _collect(self) -> None:
        """Wait at most wait_s, all together, for the questions to jobs that answered their last one; take in
        every answer that has come."""
        deadline = time.monotonic() + self.wait_s
        for pid, question in list(self.questions.items()):
            if pid not in self.silent:
                question.done.wait(max(0.0, deadline - time.monotonic()))
        for pid, question in list(self.questions.items()):
            if question.done.is_set():
                del self.questions[pid]
                self._answer(pid, question.sites)

    def _answer(self, pid: int, after: Sites | None) -> None:
        if after is None:
            self.silent.add(pid)
            return
        self.silent.discard(pid)
        before, self.before[pid] = self.before.get(pid), after
        if before is None:
            return  # the first answer: what the next is compared with
        growing: list[SiteGrowth] = []
        for site, (arrays, nbytes) in after.items():
            was = before.get(site, (0, 0))
            if nbytes > was[1]:
                growing.append(SiteGrowth(site, arrays - was[0], nbytes - was[1]))
        growing.sort(key=lambda g: -g.nbytes)
        self.growth[pid] = (growing[:5], None if growing else _NO_GROWTH)

    def _leak(self, p, first: tuple[int, int], last: tuple[int, int]) -> Leak:
        from devctl.text import printable

        growing, note = self.growth.get(p.pid, ([], None))
        if p.pid in self.silent:
            note = _NO_ANSWER if not growing else f"{_NO_ANSWER}; the lines are from an earlier answer"
        elif p.pid not in self.growth:
            note = _ASKING
        return Leak(
            p.pid, printable(" ".join(p.command), 120) or "?", self.window, first[0], last[0], first[1], last[1], list(growing), note,
        )  # fmt: skip


def _rising_streak(history: list[tuple[int, int]]) -> int:
    """How many of the last samples never fell (in arrays or bytes) from one to the next."""
    n = 1
    for prev, cur in zip(reversed(history[:-1]), reversed(history[1:])):
        if cur[0] < prev[0] or cur[1] < prev[1]:
            break
        n += 1
    return n


def _ask_sites(pid: int) -> Sites | None:
    from devctl.discovery.holders import request_top
    from devctl.errors import DevctlError

    try:
        report, _ = request_top(pid, 1, pprof=False, timeout_s=ASK_TIMEOUT_S)
    except DevctlError:
        return None
    return {s.site: (s.arrays, s.nbytes) for s in report.sites}
