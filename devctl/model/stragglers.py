"""Which of several peers is slower than the rest: a robust rule shared by every `bench` command.

    find_stragglers(values, *, higher_is_better=True, floor_pct=10.0, mad_k=3.0) -> list[Straggler]

`values` maps a peer's name (a device such as "gpu:3", a link "gpu:0->gpu:1", a host) to one figure of the
same kind (GB/s, TFLOP/s, seconds). Each figure is compared with the median of its peers' figures (every other
figure: leave-one-out, so that with few peers a straggler does not pull its own reference or spread). A peer is
a straggler when it is worse than that median by more than the larger of

  * `floor_pct` percent of the median (Megatron's sniff test flags ranks 10% off; a few percent between
    identical chips is noise, not a fault), and
  * `mad_k` robust standard deviations of its peers, 1.4826 x MAD (median absolute deviation): when the peers
    scatter widely (a busy shared machine) only a figure far outside that scatter is named.

Median and MAD, not mean and standard deviation, so that another straggler cannot drag the reference towards it:
among n peers up to about half can be slow and still be found. Only the bad side is flagged (a faster peer is not
a fault). Fewer than 2 finite figures: no peers, nothing to compare, [] returned. Figures that are not finite are
ignored; (when higher is better) figures <= 0 are left out of every reference but still judged, so a peer whose
figure is 0 is named: a device that moved nothing is the worst straggler of all.

Pure stdlib and deterministic (the result is sorted worst first, then by name): the CLI, the collectors and
the collective helper call it on measured figures; tests call it on hand-made ones.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_FLOOR_PCT = 10.0
DEFAULT_MAD_K = 3.0
# MAD x 1.4826 estimates the standard deviation of normally distributed figures.
_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Straggler:
    """One peer whose figure is worse than its peers' median by more than the rule allows."""

    name: str  # the peer, as the caller named it (a device, a link, a host)
    value: float  # its figure, in the caller's unit
    median: float  # the median of its peers' figures (every other one), same unit
    deviation_pct: float  # how much worse than that median, in percent of it (always > 0)
    threshold_pct: float  # the bar it crossed: max(floor_pct, mad_k robust sigmas of its peers), in percent of the median

    def describe(self, unit: str = "", digits: int = 1) -> str:
        """'gpu:3 412.0 GB/s, 17% below the median 498.0 GB/s' (a lower-is-better figure reads 'above')."""
        sep = " " if unit else ""
        side = "below" if self.value < self.median else "above"
        return (
            f"{self.name} {self.value:.{digits}f}{sep}{unit}, {self.deviation_pct:.0f}% {side} "
            f"the median {self.median:.{digits}f}{sep}{unit}"
        )


def find_stragglers(
    values: Mapping[str, float],
    *,
    higher_is_better: bool = True,
    floor_pct: float = DEFAULT_FLOOR_PCT,
    mad_k: float = DEFAULT_MAD_K,
) -> list[Straggler]:
    """The peers of `values` worse than the median of the others by more than max(floor_pct %, mad_k x 1.4826 x MAD
    of the others).

    `higher_is_better`: True for bandwidths and throughputs, False for times and latencies. The result is
    sorted worst first; [] when fewer than 2 figures can be compared or the median is not positive.
    """
    judged = {k: float(v) for k, v in values.items() if _finite(v)}
    if len(judged) < 2:
        return []
    found = []
    for name, value in judged.items():
        peers = [v for k, v in judged.items() if k != name and (v > 0 or (not higher_is_better and v == 0))]
        if not peers:
            continue
        median = statistics.median(peers)
        if median <= 0:
            continue
        mad = statistics.median(abs(v - median) for v in peers)
        threshold_pct = max(floor_pct, 100.0 * mad_k * _MAD_TO_SIGMA * mad / median)
        worse_by = (median - value) if higher_is_better else (value - median)
        deviation_pct = 100.0 * worse_by / median
        if deviation_pct > threshold_pct:
            found.append(Straggler(name, value, median, deviation_pct, threshold_pct))
    found.sort(key=lambda s: (-s.deviation_pct, s.name))
    return found


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
