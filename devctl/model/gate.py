"""The noise-aware regression gate of every bench (--baseline): one rule over any bench's cells, as docs/bench.md
("CI gate") states it. Pure stdlib: the CLI builds and renders these without jax."""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Any, Callable, Hashable, Iterable

from devctl.model import json_schema
from devctl.model.timing import Timing

# For roughly normal samples the p10-p90 spread is 2.563 standard deviations; a median of n samples has a
# standard error of 1.2533 standard deviations over sqrt(n); 1.96 of those bound ~95% of its chance moves.
_P10_P90_SIGMAS = 2.563
_MEDIAN_SE = 1.2533
_Z95 = 1.96
DEFAULT_MAX_REGRESSION_PCT = 10.0


def noise_pct(samples: int | None, p10_s: float | None, median_s: float | None, p90_s: float | None) -> float | None:
    """How far a median of `samples` timings could lie from the true one by chance: the half-width of its ~95%
    confidence interval, from the p10-p90 spread, in percent of the median. None without the figures."""
    if p10_s is None or p90_s is None or not median_s or not samples:
        return None
    sigma = (p90_s - p10_s) / _P10_P90_SIGMAS
    return _Z95 * _MEDIAN_SE * sigma / samples**0.5 / median_s * 100


def as_figure_pct(time_pct: float) -> float:
    """A band on a median time as a band on its figure (GB/s, TFLOP/s: work / time): a time t% longer is a figure
    100 t / (100 + t) % lower (a call 100% slower halves its GB/s: -50%, not -100%)."""
    return 100 * time_pct / (100 + time_pct)


def run_noise_pct(samples: int | None, p10_s: float | None, median_s: float | None, p90_s: float | None) -> float | None:
    """The noise band of the run being judged: its median's confidence interval (noise_pct), but never more than
    how much slower its median is than its fast decile (p10). A shared machine only ever slows calls down
    (contention, preemption, page faults): however widely a loaded run's slow calls scatter, its fast calls show
    what the path does undisturbed, so the noise cannot excuse a drop larger than they show."""
    ci = noise_pct(samples, p10_s, median_s, p90_s)
    if ci is None or not p10_s or not median_s:
        return ci
    return min(ci, max(0.0, (median_s / p10_s - 1) * 100))


@dataclass(frozen=True)
class Figure:
    """One cell as the gate sees it."""

    key: Hashable  # what identifies the cell from run to run
    label: str  # how a person names it: "cuda:0 1G", "all-reduce data 64M float32"
    value: float | None  # the headline figure, higher is better; None: nothing measured
    samples: int = 0
    p10_s: float | None = None
    median_s: float | None = None
    p90_s: float | None = None
    method: str | None = None  # how it was timed ("single", "burst"); a document from before methods: None

    @classmethod
    def of(cls, key: Hashable, label: str, value: float | None, timing: Timing) -> Figure:
        return cls(key, label, value, timing.samples, timing.p10_s, timing.median_s, timing.p90_s, timing.method)

    @property
    def noise_pct(self) -> float | None:
        return noise_pct(self.samples, self.p10_s, self.median_s, self.p90_s)

    @property
    def run_noise_pct(self) -> float | None:
        return run_noise_pct(self.samples, self.p10_s, self.median_s, self.p90_s)


@dataclass(frozen=True)
class Baseline:
    """One or more earlier runs' figures, read and validated before the benchmark runs."""

    name: str  # the file(s), as the user named them
    figures: dict[Hashable, Figure]  # only cells with a figure and its samples' spread
    runs: int = 1
    run_spread_pct: dict[Hashable, float] = field(default_factory=dict)  # per cell, half the range of the runs' figures, in %
    device_kinds: dict[str, str] = field(default_factory=dict)  # device name -> its kind, as the baseline measured it


def pool(baselines: list[Baseline]) -> Baseline:
    """Several runs as one baseline: per cell the median of the runs' figures and timings (the fewest samples, so
    the interval is not overstated), and half the range of the runs' figures in percent of their median."""
    if len(baselines) == 1:
        return baselines[0]
    runs: dict[Hashable, list[Figure]] = {}
    for b in baselines:
        for key, f in b.figures.items():
            runs.setdefault(key, []).append(f)
    figures, spread = {}, {}
    for key, fs in runs.items():
        values = [f.value for f in fs if f.value is not None]
        value = median(values)
        figures[key] = Figure(
            key, fs[0].label, value,
            samples=min(f.samples for f in fs),
            p10_s=median(f.p10_s for f in fs if f.p10_s is not None),
            median_s=median(f.median_s for f in fs if f.median_s is not None),
            p90_s=median(f.p90_s for f in fs if f.p90_s is not None),
            method=fs[0].method if len({f.method for f in fs}) == 1 else "mixed",  # runs timed two ways: not comparable
        )  # fmt: skip
        spread[key] = (max(values) - min(values)) / 2 / value * 100
    kinds = {name: kind for b in baselines for name, kind in b.device_kinds.items()}
    return Baseline(", ".join(b.name for b in baselines), figures, sum(b.runs for b in baselines), spread, kinds)


# Which cells a bench leaves out of the judgement: from the baseline, a function of each baseline figure giving
# the reason it is not judged (a key of GateSpec.left_out_words), or None to judge it.
Rule = Callable[[Baseline], Callable[[Figure], "str | None"]]


def judge_all(_: Baseline) -> Callable[[Figure], str | None]:
    return lambda f: None


@dataclass(frozen=True)
class GateSpec:
    """What one bench's results look like to the gate, and how its verdict is worded."""

    command: str  # "bench memory"
    schema: str
    cell_type: type  # its cell dataclass
    key_fields: dict[str, Any]  # field -> the type(s) it must have: what identifies a cell from run to run
    value: str  # the field judged ("gbps", "tflops", "busbw_gbps")
    unit: str
    figure: Callable[[Any], Figure]
    rule: Rule = judge_all
    judged_words: str = "cells"  # what the verdict calls the cells it judged
    missing_words: str = "nothing measured now (skipped)"  # a cell with a figure in the baseline and none now
    left_out_words: dict[str, str] = field(default_factory=dict)  # a rule's reason -> the line that says it ({n}: how many)
    check_cell: Callable[[dict], "str | None"] = lambda cell: None  # what else makes a baseline cell unusable
    nothing_judged: str = "is large enough to judge; measure larger sizes"  # ends "none of the N matching cells ..."
    all_sizes_flag: str | None = None  # the flag that judges every cell (bench transfer: --gate-all-sizes)


@dataclass(frozen=True)
class GateRequest:
    """--baseline, --max-regression (and --gate-all-sizes), validated."""

    baseline: Baseline
    max_regression_pct: float
    all_sizes: bool = False  # every compared cell judged, whatever the bench's rule leaves out


@dataclass(frozen=True)
class Regression:
    """A gated cell whose figure fell below the baseline's by more than the allowed drop plus its noise band."""

    cell: str  # the cell, as its bench names it
    baseline: float  # the baseline's figure (the median of its runs')
    value: float | None  # this run's; None: nothing measured now, or (absent) not in this run: a regression either way
    change_pct: float | None  # negative: slower than the baseline
    noise_pct: float | None = field(default=None, metadata=json_schema(minimum=0))  # the noise band: this run's ~95% interval plus the baseline's (or the spread of its runs, the wider)
    beyond_noise_pct: float | None = field(default=None, metadata=json_schema(minimum=0))  # points by which the drop went past the band
    absent: bool = False  # the baseline has the cell and this run has not (a device lost, a size no longer measured)


@dataclass(frozen=True)
class Gate:
    """This run judged against earlier ones (--baseline)."""

    baseline: str  # the file(s), as the user named them
    unit: str  # of the figures compared: "GB/s" (transfer, memory copy, collective busbw), "TFLOP/s"
    max_regression_pct: float = field(metadata=json_schema(minimum=0, exclusiveMaximum=100))  # the drop allowed beyond the noise band
    passed: bool
    compared: int = field(default=0, metadata=json_schema(minimum=0))  # cells in both runs with a figure in the baseline
    gated: int = field(default=0, metadata=json_schema(minimum=0))  # compared cells judged
    not_gated: int = field(default=0, metadata=json_schema(minimum=0))  # compared cells left out by the bench's rule
    regressions: tuple[Regression, ...] = ()
    min_noise_pct: float | None = field(default=None, metadata=json_schema(minimum=0))  # the narrowest noise band among the gated cells measured now
    max_noise_pct: float | None = field(default=None, metadata=json_schema(minimum=0))  # the widest: a drop smaller than it plus the allowance is not seen there
    baseline_runs: int = field(default=1, metadata=json_schema(minimum=1))  # earlier runs pooled into the baseline
    all_sizes: bool = False  # every compared cell judged (bench transfer --gate-all-sizes)
    # Why the cells not gated were left out, and how many each: "latency" (collective cells of 64 KiB and below),
    # "latency-bound" (transfer paths whose fixed cost is over a tenth of their time), "one-size" (a transfer path
    # measured at one size, which cannot tell fixed cost from bytes), "method" (timed another way in the baseline:
    # call by call against bursts), "noisy" (a noise band so wide that no drop could fail it).
    left_out: dict[str, int] = field(default_factory=dict)


# Why the gate itself leaves a compared cell out (a bench's rule adds its own reasons: GateSpec.left_out_words).
GATE_LEFT_OUT_WORDS = {
    "method": "{n} cells timed another way in the baseline (call by call against bursts, or a document from before "
    "bursts): not gated; record the baseline again with this devctl",
    "noisy": "{n} cells too noisy to gate: their noise band alone leaves no drop that could fail; more --repeats, "
    "a quieter machine or more baseline runs narrow it",
}


def judge(
    figures: Iterable[Figure], baseline: Baseline, max_regression_pct: float, unit: str,
    rule: Rule = judge_all, *, all_sizes: bool = False,
) -> Gate:  # fmt: skip
    """Every cell of this run that the baseline has, those the rule does not leave out judged against their band;
    and every cell the rule would judge that the baseline has and this run has not (absent: a regression).

    The band is in figure terms, as the change is: each median's noise (time) as_figure_pct, the baseline's the
    wider of that and its runs' spread (already a spread of figures)."""
    why_not = rule(baseline)
    compared = judged = 0
    left_out: dict[str, int] = {}
    regressions, bands = [], []
    seen = set()

    def leave_out(why: str) -> None:
        left_out[why] = left_out.get(why, 0) + 1

    for f in figures:
        seen.add(f.key)
        base = baseline.figures.get(f.key)
        if base is None or base.value is None:
            continue
        compared += 1
        why = None if all_sizes else why_not(base)
        if why is not None:
            leave_out(why)
            continue
        if f.value is None:
            judged += 1
            regressions.append(Regression(f.label, base.value, None, None))
            continue
        if (base.method or "single") != (f.method or "single"):  # a document from before bursts timed call by call
            leave_out("method")
            continue
        base_band = max(as_figure_pct(base.run_noise_pct or 0.0), baseline.run_spread_pct.get(f.key, 0.0))
        band = base_band + as_figure_pct(f.run_noise_pct or 0.0)
        if band + max_regression_pct >= 100 and band >= max_regression_pct:  # the noise, not the allowance asked, lets no drop fail
            leave_out("noisy")
            continue
        judged += 1
        bands.append(band)
        change = (f.value / base.value - 1) * 100
        beyond = -change - band
        if beyond > max_regression_pct:
            regressions.append(Regression(f.label, base.value, f.value, change, band, beyond))
    for key, base in baseline.figures.items():
        if key not in seen and base.value is not None and (all_sizes or why_not(base) is None):
            judged += 1
            regressions.append(Regression(base.label, base.value, None, None, absent=True))
    return Gate(
        baseline.name, unit, max_regression_pct, not regressions, compared, judged, sum(left_out.values()),
        tuple(regressions), min(bands, default=None), max(bands, default=None), baseline.runs, all_sizes, left_out,
    )  # fmt: skip
