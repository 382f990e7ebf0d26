"""--baseline, --max-regression and --gate-all-sizes of every bench command, parsed (read: devctl.collect.gate)."""

from __future__ import annotations

import re
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.options import read_input_file, shown
from devctl.errors import UsageError
from devctl.model.gate import DEFAULT_MAX_REGRESSION_PCT, GateRequest, GateSpec

MaxRegressionOpt = Annotated[
    Optional[str],
    typer.Option(
        "--max-regression",
        metavar="PCT",
        autocompletion=completion.percent,
        help="Allowed drop per cell beyond its noise band (the confidence intervals of the two medians, and how far pooled baseline runs differ), a percentage in [0%, 100%): 10% or 2.5% (default 10%). "
        "A bare number of 1 or more is a percentage (10 = 10%); a bare number below 1 (0.1: 10% or 0.1%?) is refused.",
    ),
]
BaselineOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--baseline",
        metavar="FILE",
        autocompletion=completion.files,
        help="An earlier --json result of this command (a regular file): exit 1 if a cell's figure fell below it by more than "
        "its noise and --max-regression. Repeat it to pool several runs (3 or more recommended): how far they differ joins the noise band.",
    ),
]
GateAllSizesOpt = Annotated[
    bool,
    typer.Option(
        "--gate-all-sizes",
        help="With --baseline: judge latency-bound cells too (by default only bandwidth-bound cells are, those whose "
        "fixed per-transfer cost is at most a tenth of their time in the baseline).",
    ),
]  # taken by a bench whose GateSpec names all_sizes_flag (bench transfer)

_PERCENT_RE = re.compile(r"^\s*(\d{1,6}(?:\.\d{1,6})?)\s*(%?)\s*$", re.ASCII)


def parse_percent(text: str) -> float:
    """--max-regression: '10%', '2.5%', or a bare number of 1 or more (below 1 it could be a fraction: refused)."""
    m_ = _PERCENT_RE.match(text)
    if not m_:
        raise UsageError(f"--max-regression {shown(text)} is not a percentage; give e.g. 10% or 2.5%")
    value = float(m_.group(1))
    if not m_.group(2) and 0 < value < 1:
        plain = lambda v: f"{v:.6f}".rstrip("0").rstrip(".")  # noqa: E731  # as the parser reads it back: no 1e-06
        raise UsageError(
            f"--max-regression {text!r} is ambiguous: write {plain(value * 100)}% for a drop of {plain(value * 100)} percent, "
            f"or {plain(value)}% for {plain(value)} percent"
        )
    if value >= 100:
        raise UsageError(f"--max-regression must be at least 0% and below 100%, got {text!r}")
    return value


def check_gate(baselines: list[str] | None, max_regression: str | None, spec: GateSpec, all_sizes: bool = False) -> GateRequest | None:
    """The baseline (several runs pooled when --baseline is repeated), read and checked before the benchmark runs,
    the drop allowed beyond its noise band, and which cells to judge; None without --baseline."""
    if not baselines:
        given = "--max-regression" if max_regression is not None else spec.all_sizes_flag if all_sizes else None
        if given:
            raise UsageError(f"{given} needs --baseline FILE (an earlier `devctl {spec.command} --json` result)")
        return None
    pct = parse_percent(max_regression) if max_regression is not None else DEFAULT_MAX_REGRESSION_PCT
    for i, path in enumerate(baselines):
        if path in baselines[:i]:
            raise UsageError(f"--baseline {shown(path)} is given twice; pool different runs (each run's own --json result)")
    from devctl.collect.gate import read_baselines

    files = [(path, read_input_file("--baseline", path)) for path in baselines]
    return read_baselines(files, spec, pct, all_sizes)
