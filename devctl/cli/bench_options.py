"""The options and checks the `devctl bench` commands share (each command has its own module:
devctl/cli/bench_transfer.py, bench_collective.py, bench_memory.py, bench_matmul.py). No jax here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Optional

import typer

from devctl.cli import completion
from devctl.cli.gate import BaselineOpt, MaxRegressionOpt, check_gate, finish, measure
from devctl.cli.options import (
    CsvOpt,
    JsonOpt,
    check_count,
    check_output_format,
    check_seconds,
    check_timeout,
    option_group,
    parse_devices,
    split_list,
)
from devctl.errors import UsageError
from devctl.model import bench as c

Option = typer.Option


def sizes_option(help: str, complete: bool = True) -> Any:
    """A bench's --sizes (its help says what a size is, and the default sweep)."""
    return Option("--sizes", metavar="LIST", autocompletion=completion.sizes if complete else None, help=help)


def device_option(help: str) -> Any:
    """A bench's --device (its help says which devices, and the default)."""
    return Option("--device", metavar="ID", autocompletion=completion.devices(), help=help)


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
    device_option(
        "Device(s) to measure, taking turns call by call: a JAX id or platform:id (0, cpu:1, cuda:0), "
        "repeatable or comma-separated, or all (the default: every local device, so they can be compared)."
    ),
]
VerboseOpt = Annotated[bool, Option("--verbose", "-v", help="Also say how the figures were measured (the method) and the straggler rule.")]
# A string, parsed by check_timeout as every command's --timeout is, so a bad value is named in the error.
WatchdogOpt = Annotated[
    Optional[str],
    Option("--timeout", metavar="SECONDS", help="Stop when no progress is seen for this long (default 30, at most 60)."),
]


@dataclass(frozen=True)
class PerDeviceFlags:
    """The options bench memory and bench matmul share, as given."""

    quick: bool
    repeats: int | None
    min_time: float | None
    warmups: int | None
    device: list[str] | None
    baseline: list[str] | None
    max_regression: str | None
    timeout: str | None
    json_out: bool
    csv_out: bool
    verbose: bool


PER_DEVICE: dict[str, tuple[Any, Any]] = {
    "quick": (QuickOpt, False), "repeats": (RepeatsOpt, None), "min_time": (MinTimeOpt, None), "warmups": (WarmupsOpt, None),
    "device": (DeviceOpt, None), "baseline": (BaselineOpt, None), "max_regression": (MaxRegressionOpt, None),
    "timeout": (WatchdogOpt, None), "json_out": (JsonOpt, False), "csv_out": (CsvOpt, False), "verbose": (VerboseOpt, False),
}  # fmt: skip
# `@per_device_options`: a per-device bench command declares its own options; it is called with `flags` for these.
per_device_options = option_group(PER_DEVICE, ("flags",), lambda **given: {"flags": PerDeviceFlags(**given)})


def run_per_device(flags: PerDeviceFlags, build: Callable[..., Any], spec: Any, run: Callable[..., Any],
                   label: Callable[[dict], str], comparisons: Callable[[Any], Iterable[Any]], what: str, wrong: str) -> None:  # fmt: skip
    """A per-device bench from its flags: `build(devices=..., repeats=..., ...)` is its options (the shared ones
    given, the bench's own parsed by it), `run(opts, timeout_s, on_event=...)` its report; then stragglers, the gate
    and a wrong result on stderr, and the exit code."""
    check_output_format(flags.json_out, flags.csv_out)
    quick = flags.quick
    opts = build(
        devices=parse_devices("--device", flags.device),
        repeats=check_count("--repeats", flags.repeats, c.QUICK_REPEATS if quick else c.DEFAULT_REPEATS, low=1),
        min_time_s=check_seconds("--min-time", flags.min_time, c.QUICK_MIN_TIME_S if quick else c.DEFAULT_MIN_TIME_S),
        warmups=check_count("--warmups", flags.warmups, c.QUICK_WARMUPS if quick else c.DEFAULT_WARMUPS, low=0),
        quick=quick,
    )
    request = check_gate(flags.baseline, flags.max_regression, spec)
    timeout_s = check_timeout(flags.timeout)
    report = measure(lambda on: run(opts, timeout_s, on_event=on), label, request, spec, flags.json_out, flags.csv_out, flags.verbose)
    failed = any(cell.verified is False for cell in report.results)
    finish(report, spec, notes=straggler_lines(comparisons(report), what), failures=[f"{what} verification failed: {wrong}"] if failed else [])


def straggler_lines(comparisons: Iterable[Any], what: str) -> list[str]:
    """One stderr line per straggler: the device, its figure and the median, so a log names the slow device."""
    from devctl.units import digits

    lines = []
    for comp in comparisons:
        for s in comp.stragglers:
            lines.append(f"straggler: {what} {comp.metric}: {s.describe(comp.unit, digits=digits(comp.median))}")
    return lines


def parse_sizes(text: str, example: str = "4K,1M,64M,1G", minimum: int = 1, unit: str = "byte", maximum: int | None = None) -> tuple[int, ...]:
    """--sizes of a bench: sizes such as 4K,1M (binary K, M, G, T; decimal KB, MB, GB), each from `minimum` (a
    `unit`) to `maximum`, sorted and without repeats."""
    from devctl.units import parse_size

    out = set()
    for p in split_list("--sizes", [text], f"sizes such as {example}"):
        try:
            n = parse_size(p)
        except ValueError as e:
            raise UsageError(f"--sizes: {e}") from None
        if n < max(minimum, 1):
            raise UsageError(f"--sizes: a size must be at least {minimum} {unit}, got {p!r}")
        if maximum is not None and n > maximum:
            raise UsageError(f"--sizes: {p!r} is more than 1T per device; give sizes such as {example}")
        out.add(n)
    return tuple(sorted(out))
