"""--baseline of `bench memory`, `bench matmul` and `bench collective`: the report judged against earlier runs by
devctl.model.gate. A baseline that shares no cell with the run, or none the gate may judge, judges nothing: bad
input, not a pass."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, TypeVar

from devctl.errors import InputRejected
from devctl.model.gate import BenchGateRequest, Figure, judge

R = TypeVar("R")


def with_gate(report: R, request: BenchGateRequest, figures: Iterable[Figure], unit: str, command: str,
              gated: Callable[[Figure], bool] = lambda f: True) -> R:  # fmt: skip
    from devctl.text import printable

    gate = judge(figures, request.baseline, request.max_regression_pct, unit, gated)
    name = printable(repr(request.baseline.name), 120)
    if gate.compared == 0:
        raise InputRejected(f"--baseline {name} has no cell matching this run; create it with the same `devctl {command}` options")
    if gate.gated == 0:
        raise InputRejected(f"--baseline {name}: none of the {gate.compared} matching cells is large enough to judge; measure larger sizes")
    return replace(report, gate=gate)  # type: ignore[type-var]  # every bench report is a dataclass with a gate field
