"""What the `devctl bench` commands share: the flags every bench takes, and the one end of a bench command."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Optional

import typer

from devctl.cli import completion
from devctl.cli.gate import BaselineOpt, GateAllSizesOpt, MaxRegressionOpt, check_gate
from devctl.cli.options import CsvOpt, JsonOpt, check_count, check_output_format, check_seconds, check_timeout, option_group, split_list
from devctl.errors import UsageError
from devctl.model.gate import GateSpec

Option = typer.Option


def sizes_option(help: str, complete: bool = True) -> Any:
    """A bench's --sizes (its help says what a size is, and the default sweep)."""
    return Option("--sizes", metavar="LIST", autocompletion=completion.sizes if complete else None, help=help)


def device_option(help: str) -> Any:
    """A bench's --device (its help says which devices, and the default)."""
    return Option("--device", metavar="ID", autocompletion=completion.devices(), help=help)


# bench memory's and bench matmul's --device.
DeviceOpt = Annotated[
    Optional[list[str]],
    device_option(
        "Device(s) to measure, taking turns sample by sample: a JAX id or platform:id (0, cpu:1, cuda:0), "
        "repeatable or comma-separated, or all (the default: every local device, so they can be compared)."
    ),
]
VerboseOpt = Annotated[bool, Option("--verbose", "-v", help="Also say how the figures were measured (the method) and, where devices are compared, the straggler rule.")]
# A string, parsed by check_timeout as every command's --timeout is, so a bad value is named in the error.
WatchdogOpt = Annotated[
    Optional[str],
    Option("--timeout", metavar="SECONDS", help="Stop when no progress is seen for this long (default 30, at most 60)."),
]


@dataclass(frozen=True)
class Bench:
    """One bench command as the shared flags see it: its gate, and its defaults (`defaults`' DEFAULT_/QUICK_ names)."""

    spec: GateSpec
    defaults: Any
    quick: str  # what --quick measures, the start of its help: "A few sizes"
    seconds: str = "min_time_s"  # the options' field for timed seconds per cell; its flag is --min-time (collective: --budget)
    seconds_help: str = "Timed seconds per cell, at least"
    most: int = 1_000_000  # the most --repeats and --warmups accept
    verbose: bool = False  # it takes --verbose

    @property
    def seconds_flag(self) -> str:
        return "--" + self.seconds.removesuffix("_s").replace("_", "-")

    def default(self, name: str, quick: bool) -> Any:
        return getattr(self.defaults, f"{'QUICK' if quick else 'DEFAULT'}_{name.upper()}")

    def stated(self, name: str) -> str:
        full, quick = self.default(name, False), self.default(name, True)
        return f"(default {full:g})" if full == quick else f"(default {full:g}; --quick {quick:g})"

    def counts(self, quick: bool, repeats: int | None, seconds: float | None, warmups: int | None) -> dict[str, Any]:
        """--quick, --repeats, --min-time (or --budget) and --warmups checked: the bench options' fields."""
        return {
            "repeats": check_count("--repeats", repeats, self.default("repeats", quick), low=1, high=self.most),
            self.seconds: check_seconds(self.seconds_flag, seconds, self.default(self.seconds, quick)),
            "warmups": check_count("--warmups", warmups, self.default("warmups", quick), low=0, high=self.most),
            "quick": quick,
        }


@dataclass(frozen=True)
class BenchFlags:
    """The shared flags of one bench command, as given (--timeout checked)."""

    bench: Bench
    quick: bool
    repeats: int | None
    min_time: float | None  # --min-time, or collective's --budget
    warmups: int | None
    baseline: list[str] | None
    max_regression: str | None
    timeout_s: float
    json_out: bool
    csv_out: bool
    gate_all_sizes: bool = False
    verbose: bool = False

    def counts(self) -> dict[str, Any]:
        return self.bench.counts(self.quick, self.repeats, self.min_time, self.warmups)


def bench_options(bench: Bench) -> Callable:
    """`@bench_options(BENCH)`: the flags every bench takes, after the command's own, their help stating `bench`'s
    defaults; the command is called with `flags` (BenchFlags) for them, --json/--csv and --timeout checked first."""
    options: dict[str, tuple[Any, Any]] = {
        "quick": (Annotated[bool, Option("--quick", help=f"{bench.quick} and a short budget: a smoke test in seconds. "
                                         f"--sizes, --repeats, {bench.seconds_flag} and --warmups given too override it.")], False),
        "repeats": (Annotated[Optional[int], Option("--repeats", metavar="N", help=f"Timed samples per cell, at least {bench.stated('repeats')}.")], None),
        "min_time": (Annotated[Optional[float], Option(bench.seconds_flag, metavar="SECONDS", help=f"{bench.seconds_help} {bench.stated(bench.seconds)}.")], None),
        "warmups": (Annotated[Optional[int], Option("--warmups", metavar="N", help=f"Untimed calls first {bench.stated('warmups')}.")], None),
        "baseline": (BaselineOpt, None), "max_regression": (MaxRegressionOpt, None), "gate_all_sizes": (GateAllSizesOpt, False),
        "timeout": (WatchdogOpt, None), "json_out": (JsonOpt, False), "csv_out": (CsvOpt, False), "verbose": (VerboseOpt, False),
    }  # fmt: skip
    if bench.spec.all_sizes_flag is None:
        del options["gate_all_sizes"]
    if not bench.verbose:
        del options["verbose"]

    def given(timeout: str | None, json_out: bool, csv_out: bool, **flags: Any) -> dict[str, Any]:
        check_output_format(json_out, csv_out)
        return {"flags": BenchFlags(bench, timeout_s=check_timeout(timeout), json_out=json_out, csv_out=csv_out, **flags)}

    return option_group(options, ("flags",), given)


def run_bench(flags: BenchFlags, run: Callable[..., Any], opts: Any, label: Callable[[dict], str], what: str, wrong: str, *,
              comparisons: Callable[[Any], Iterable[Any]] = lambda report: (), prints: Callable[[Any], bool] = lambda report: True) -> None:  # fmt: skip
    """A bench command from its options on: run (`label` names each finished cell on the progress bar), judged
    against --baseline, printed (unless `prints(report)` says it is not this process's to print); the stragglers of
    `comparisons(report)`, the gate's verdict and a wrong result ("{what} verification failed: {wrong}") on stderr;
    exit 1 if a result was wrong or the gate failed."""
    spec = flags.bench.spec
    request = check_gate(flags.baseline, flags.max_regression, spec, flags.gate_all_sizes)
    from devctl.collect.gate import judged
    from devctl.render import emit
    from devctl.render.bench import Progress
    from devctl.units import digits

    with Progress(label) as progress:
        report = run(opts, flags.timeout_s, on_event=progress.on_event)
    if not prints(report):
        return
    report = judged(report, request, spec)
    emit(report, flags.json_out, csv_out=flags.csv_out, verbose=flags.verbose)
    lines = [f"straggler: {what} {c.metric}: {s.describe(c.unit, digits=digits(c.median))}" for c in comparisons(report) for s in c.stragglers]
    if report.gate is not None:
        from devctl.render.gate import gate_lines

        lines += gate_lines(report.gate, spec)
    wrong_result = any(cell.verified is False for cell in report.results)
    if wrong_result:
        lines.append(f"{what} verification failed: {wrong}")
    for line in lines:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    if wrong_result or (report.gate is not None and not report.gate.passed):
        raise typer.Exit(1)


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
