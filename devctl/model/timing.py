"""How every bench cell was timed, one type for all four benches: its method, its samples' statistics (seconds
per call), and the per-call overhead a step that waits for its result pays on top.

A cell dataclass inherits Timing; the fields stay flat in the cell's JSON (`median_s`, `p10_s`, ...), as the
gate and every earlier --json result read them. Pure stdlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from devctl.model import json_schema
from devctl.units import percentile

STAT_KEYS = ("min_s", "p10_s", "median_s", "p90_s", "max_s", "mean_s", "cv")


@dataclass(frozen=True, kw_only=True)
class Timing:
    """A cell's timing: how it was timed and its samples' statistics, in seconds per call."""

    # burst: K calls dispatched back to back between two synchronisations, the figure the burst's time / K (the
    # chip's own speed; the launch and sync measured apart as call_overhead_s). single: each sample one call and its
    # synchronisation, where that fixed cost is the figure (a 4 KiB transfer, a small collective) or where a call
    # cannot be repeated without a fresh input (a transfer from the host). None: nothing timed.
    method: str | None = field(default=None, metadata=json_schema(enum=("burst", "single", None)))
    samples: int = field(default=0, metadata=json_schema(minimum=0))  # samples timed; each gives one time per call
    # burst: calls dispatched back to back per sample, then one block_until_ready on the last, calibrated so that a
    # burst lasts the run's burst_min_s; single: 1. None: nothing timed.
    calls_per_sample: int | None = field(default=None, metadata=json_schema(minimum=1))
    min_s: float | None = field(default=None, metadata=json_schema(minimum=0))  # seconds per call, min ... max over the samples
    p10_s: float | None = field(default=None, metadata=json_schema(minimum=0))
    median_s: float | None = field(default=None, metadata=json_schema(minimum=0))
    p90_s: float | None = field(default=None, metadata=json_schema(minimum=0))
    max_s: float | None = field(default=None, metadata=json_schema(minimum=0))
    mean_s: float | None = field(default=None, metadata=json_schema(minimum=0))
    cv: float | None = field(default=None, metadata=json_schema(minimum=0))  # coefficient of variation of the samples
    single_call_s: float | None = field(default=None, metadata=json_schema(minimum=0))  # median of one call + its synchronisation, timed alone
    # Launch + host synchronisation per call (burst cells): the median over the rounds of a call timed alone less the
    # time per call of the burst right after it, 0 where the single calls were no slower. A step that waits for its
    # result pays it; the figures leave it out. A single-call cell's figures include it.
    call_overhead_s: float | None = field(default=None, metadata=json_schema(minimum=0))


def sample_stats(samples: list[float]) -> dict[str, float | None]:
    """min, p10, median, p90, max, mean and the coefficient of variation of seconds-per-call samples."""
    if not samples:
        return dict.fromkeys(STAT_KEYS)
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n
    cv = None
    if n > 1 and mean > 0:
        cv = (sum((x - mean) ** 2 for x in s) / (n - 1)) ** 0.5 / mean
    return {
        "min_s": s[0],
        "p10_s": percentile(s, 10),
        "median_s": percentile(s, 50),
        "p90_s": percentile(s, 90),
        "max_s": s[-1],
        "mean_s": mean,
        "cv": cv,
    }


def single_timing(samples: list[float]) -> dict[str, Any]:
    """The Timing fields of a cell timed call by call (method single; none of them without samples)."""
    timed = bool(samples)
    return {"method": "single" if timed else None, "samples": len(samples), "calls_per_sample": 1 if timed else None, **sample_stats(samples)}
