"""The options and checks the `devctl bench` commands share (each command has its own module:
devctl/cli/bench_transfer.py, bench_collective.py, bench_memory.py, bench_matmul.py). No jax here."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from devctl.cli import completion
from devctl.cli.options import check_count, check_seconds
from devctl.model import bench as c

Option = typer.Option
QuickOpt = Annotated[
    bool,
    Option("--quick", help="One size and a short budget: a smoke test in seconds. --sizes, --repeats, --min-time and --warmups given too override it."),
]
RepeatsOpt = Annotated[
    Optional[int], Option("--repeats", metavar="N", help=f"Timed samples per device and size, at least, each a burst of calls (default {c.DEFAULT_REPEATS}).")
]
MinTimeOpt = Annotated[
    Optional[float],
    Option("--min-time", metavar="SECONDS", help=f"Timed seconds per device and size, at least (default {c.DEFAULT_MIN_TIME_S:g}; --quick {c.QUICK_MIN_TIME_S:g})."),
]
WarmupsOpt = Annotated[
    Optional[int], Option("--warmups", metavar="N", help=f"Untimed calls first, after compiling (default {c.DEFAULT_WARMUPS}).")
]
DeviceOpt = Annotated[
    Optional[list[str]],
    Option(
        "--device",
        metavar="ID",
        autocompletion=completion.devices(),
        help="Device(s) to measure, taking turns call by call: a JAX id or platform:id (0, cpu:1, cuda:0), "
        "repeatable or comma-separated, or all (the default: every local device, so they can be compared).",
    ),
]
VerboseOpt = Annotated[bool, Option("--verbose", "-v", help="Also say how the figures were measured (the method) and the straggler rule.")]
# A string, parsed by check_timeout as every command's --timeout is, so a bad value is named in the error.
WatchdogOpt = Annotated[
    Optional[str],
    Option("--timeout", metavar="SECONDS", help="Stop when no progress is seen for this long (default 30, at most 60)."),
]


def chip_settings(quick: bool, repeats: int | None, min_time: float | None, warmups: int | None) -> dict:
    """--repeats, --min-time and --warmups, checked, with --quick's defaults where not given."""
    return dict(
        repeats=check_count("--repeats", repeats, c.QUICK_REPEATS if quick else c.DEFAULT_REPEATS, low=1),
        min_time_s=check_seconds("--min-time", min_time, c.QUICK_MIN_TIME_S if quick else c.DEFAULT_MIN_TIME_S),
        warmups=check_count("--warmups", warmups, c.QUICK_WARMUPS if quick else c.DEFAULT_WARMUPS, low=0),
        quick=quick,
    )


def stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def straggler_lines(comparisons, what: str) -> list[str]:
    """One stderr line per straggler: the device, its figure and the median, so a log names the slow device."""
    from devctl.units import digits

    lines = []
    for comp in comparisons:
        for s in comp.stragglers:
            lines.append(f"straggler: {what} {comp.metric}: {s.describe(comp.unit, digits=digits(comp.median))}")
    return lines


def finish(report, comparisons, spec, what: str, wrong: str) -> None:
    """After the report: its stragglers and the gate's verdict on stderr; exit 1 when a result was wrong (`wrong`
    says how) or the gate failed."""
    from devctl.cli import gate

    failed = any(c.verified is False for c in report.results)
    gate.finish(report, spec, notes=straggler_lines(comparisons, what), failures=[f"{what} verification failed: {wrong}"] if failed else [])
