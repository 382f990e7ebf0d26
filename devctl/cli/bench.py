"""`devctl bench`: benchmarks of the paths a JAX program uses.

`devctl bench transfer` validates every flag here, in the CLI process, before
a probe child (devctl/probe/transfer.py) imports jax and measures. Only light
modules are imported at the top: `devctl --help` must not pay for jax.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Annotated, Optional

import typer

from devctl.cli.options import (
    JsonOpt,
    check_timeout,
    quoted,
    read_input_file,
    shown,
    split_list,
)
from devctl.errors import UsageError
from devctl.model import bench as m

bench_app = typer.Typer(help="Benchmarks of the paths a JAX program uses.", no_args_is_help=True)

DEFAULT_MAX_REGRESSION_PCT = 10.0


Option = typer.Option
DirectionOpt = Annotated[
    Optional[list[str]],
    Option(
        "--direction", "-d", metavar="DIR", help="h2d, d2h, d2d, d2d-self or all (the default); repeatable or comma-separated."
    ),
]
VariantsOpt = Annotated[
    str,
    Option("--variants", metavar="NAMES", help="main (each direction's plain call), all, or: " + ", ".join(m.ALL_VARIANTS)),
]
SizesOpt = Annotated[
    Optional[str],
    Option(
        "--sizes",
        metavar="LIST",
        help="e.g. 4K,1M,64M,1G (K, M, G, T and KiB... are binary; KB, MB, GB are decimal). Default: 4K to 256M "
        "(1G where the device has room). A size this machine's memory cannot hold is an error.",
    ),
]
QuickOpt = Annotated[
    bool,
    Option("--quick", help="A few sizes and a short budget: a smoke test in seconds. --sizes, --repeats, --min-time and --warmups given too override it."),
]
RepeatsOpt = Annotated[
    Optional[int],
    Option("--repeats", metavar="N", help=f"Timed repetitions per cell, at least (default {m.DEFAULT_REPEATS})."),
]
MinTimeOpt = Annotated[
    Optional[float],
    Option("--min-time", metavar="SECONDS", help=f"Timed seconds per cell, at least (default {m.DEFAULT_MIN_TIME_S:g})."),
]
WarmupsOpt = Annotated[
    Optional[int], Option("--warmups", metavar="N", help=f"Untimed transfers first (default {m.DEFAULT_WARMUPS}).")
]
VerifyOpt = Annotated[bool, Option("--verify/--no-verify", help="Check, once per cell, that the bytes arrive unchanged.")]
ShardedOpt = Annotated[
    bool, Option("--sharded", help="One array sharded over all local devices (aggregate bandwidth); not with --device, --src, --dst, --all-pairs or --variants.")
]
ReplicatedOpt = Annotated[bool, Option("--replicated", help="One array replicated on every local device; not with --device, --src, --dst, --all-pairs or --variants.")]
DeviceOpt = Annotated[
    Optional[list[str]],
    Option("--device", metavar="ID", help="Device(s) for h2d, d2h and d2d-self: ids or all. Default: the first. Not with --sharded or --replicated."),
]
SrcOpt = Annotated[Optional[int], Option("--src", metavar="ID", help="d2d: the source device (not with --all-pairs).")]
DstOpt = Annotated[Optional[int], Option("--dst", metavar="ID", help="d2d: the destination device (not with --all-pairs).")]
AllPairsOpt = Annotated[bool, Option("--all-pairs", help="d2d: every ordered pair of devices at every size.")]
BaselineOpt = Annotated[
    Optional[str], Option("--baseline", metavar="FILE", help="An earlier --json result (a regular file): exit 1 if a cell fell below it.")
]
MaxRegressionOpt = Annotated[
    Optional[str],
    Option(
        "--max-regression",
        metavar="PCT",
        help="Allowed drop below the baseline per cell, a percentage in [0%, 100%): 10% or 2.5% (default 10%). "
        "A bare number of 1 or more is a percentage (10 = 10%); a bare number below 1 (0.1: 10% or 0.1%?) is refused.",
    ),
]
# A string, parsed by check_timeout as every command's --timeout is, so a bad value is named in the error.
WatchdogOpt = Annotated[
    Optional[str],
    Option("--timeout", metavar="SECONDS", help="Stop when no progress is seen for this long (default 30, at most 60)."),
]


@bench_app.command("transfer")
def transfer(
    direction: DirectionOpt = None,
    variants: VariantsOpt = "main",
    sizes: SizesOpt = None,
    quick: QuickOpt = False,
    repeats: RepeatsOpt = None,
    min_time: MinTimeOpt = None,
    warmups: WarmupsOpt = None,
    verify: VerifyOpt = True,
    sharded: ShardedOpt = False,
    replicated: ReplicatedOpt = False,
    device: DeviceOpt = None,
    src: SrcOpt = None,
    dst: DstOpt = None,
    all_pairs: AllPairsOpt = False,
    baseline: BaselineOpt = None,
    max_regression: MaxRegressionOpt = None,
    timeout: WatchdogOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Host<->device and device<->device transfer bandwidth, against the host memcpy and PCIe roofs."""
    opts = build_options(
        direction, variants, sizes, quick, repeats, min_time, warmups, verify,
        sharded, replicated, device, src, dst, all_pairs,
    )  # fmt: skip
    gate = check_gate(baseline, max_regression)
    timeout_s = check_timeout(timeout)
    report = _run(opts, timeout_s)
    code = 0
    if gate is not None:
        report = _with_gate(report, *gate)
    from devctl.render import bench as render

    if json_out:
        render.transfer_json(report)
    else:
        render.transfer_text(report)
    if any(c.verified is False for c in report.results):
        _stderr_line("transfer verification failed: the bytes of some cells did not arrive unchanged")
        code = 1
    if report.gate is not None:
        for line in render.gate_lines(report.gate):
            _stderr_line(line)
        if not report.gate.passed:
            code = 1
    if code:
        raise typer.Exit(code)


# ---- validation (no jax here) ------------------------------------------------------------------


def build_options(
    direction, variants, sizes, quick, repeats, min_time, warmups, verify,
    sharded, replicated, device, src, dst, all_pairs,
) -> m.TransferOptions:  # fmt: skip
    directions = parse_directions(direction)
    layouts = tuple(name for name, on in (("sharded", sharded), ("replicated", replicated)) if on) or ("single",)
    chosen_variants = parse_variants(variants, directions)
    devices = parse_devices(device)
    check_conflicts(directions, layouts, chosen_variants, devices, src, dst, all_pairs)
    return m.TransferOptions(
        directions=directions,
        variants=chosen_variants,
        layouts=layouts,
        sizes_bytes=parse_sizes(sizes) if sizes is not None else None,
        devices=devices,
        src=_check_id("--src", src),
        dst=_check_dst(src, dst),
        all_pairs=all_pairs,
        repeats=_check_count("--repeats", repeats, m.QUICK_REPEATS if quick else m.DEFAULT_REPEATS, low=1),
        min_time_s=_check_min_time(min_time, m.QUICK_MIN_TIME_S if quick else m.DEFAULT_MIN_TIME_S),
        warmups=_check_count("--warmups", warmups, m.QUICK_WARMUPS if quick else m.DEFAULT_WARMUPS, low=0),
        verify=verify,
        quick=quick,
    )


def parse_directions(items: list[str] | None) -> tuple[str, ...]:
    names = split_list("--direction", items, f"one or more of {', '.join(m.DIRECTIONS)}, all")
    if names is None:
        return m.DIRECTIONS
    names = [n.lower() for n in names]
    for n in names:
        if n not in m.DIRECTIONS and n != "all":
            raise UsageError(f"unknown --direction {shown(n)}; accepted: {', '.join(m.DIRECTIONS)}, all")
    if "all" in names:
        return m.DIRECTIONS
    return tuple(d for d in m.DIRECTIONS if d in names)


def parse_variants(text: str, directions: tuple[str, ...]) -> tuple[str, ...] | None:
    names = [n.lower() for n in split_list("--variants", [text], f"main, all, or some of {', '.join(m.ALL_VARIANTS)}")]
    for n in names:
        if n in ("main", "all"):
            continue
        if n not in m.ALL_VARIANTS:
            raise UsageError(f"unknown --variants name {shown(n)}; accepted: main, all, {', '.join(m.ALL_VARIANTS)}")
        if not any(n in m.VARIANTS[d] for d in directions):
            offers = "; ".join(f"{d}: {', '.join(m.VARIANTS[d])}" for d in directions)
            raise UsageError(f"--variants {n!r} applies to none of the directions measured ({offers})")
    if "all" in names:
        return m.ALL_VARIANTS
    if set(names) == {"main"}:
        return None
    chosen = set(names)
    if "main" in chosen:
        chosen |= {m.main_variant(d) for d in directions}
    return tuple(v for v in m.ALL_VARIANTS if v in chosen)


def parse_sizes(text: str) -> tuple[int, ...]:
    from devctl.units import parse_size

    out = set()
    for p in split_list("--sizes", [text], "sizes such as 4K,1M,64M,1G"):
        try:
            n = parse_size(p)
        except ValueError as e:
            raise UsageError(f"--sizes: {e}") from None
        if n <= 0:
            raise UsageError(f"--sizes: a size must be at least 1 byte, got {p!r}")
        out.add(n)
    return tuple(sorted(out))


def parse_devices(items: list[str] | None) -> tuple[int, ...] | None:
    names = split_list("--device", items, "device ids such as 0 or 0,1, or all")
    if names is None:
        return None
    if any(n.lower() == "all" for n in names):
        return ()
    ids = []
    for n in names:
        # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
        if not (n.isascii() and n.isdigit() and len(n) <= 9):
            raise UsageError(f"--device {shown(n)} is not a device id; give a number such as 0, or all")
        ids.append(int(n))
    return tuple(dict.fromkeys(ids))


def check_conflicts(directions, layouts, variants, devices, src, dst, all_pairs) -> None:
    """Flags that would be silently ignored together are an error: the user asked for something devctl would not do."""
    pair_flags = [f for f, on in (("--src", src is not None), ("--dst", dst is not None), ("--all-pairs", all_pairs)) if on]
    if all_pairs and (src is not None or dst is not None):
        raise UsageError("--all-pairs measures every pair of devices; give it or --src/--dst, not both")
    if pair_flags and "d2d" not in directions:
        raise UsageError(f"{pair_flags[0]} chooses d2d pairs, but d2d is not among the directions measured ({', '.join(directions)})")
    mesh = [f"--{name}" for name in layouts if name != "single"]
    if mesh:
        single_only = pair_flags + (["--device"] if devices is not None else []) + (["--variants"] if variants is not None else [])
        if single_only:
            raise UsageError(
                f"{' and '.join(mesh)} {'use' if len(mesh) > 1 else 'uses'} every local device with each direction's plain call: "
                f"{single_only[0]} does not apply (it is for the single-device layout)"
            )
    if devices is not None and pair_flags and not set(directions) & {"h2d", "d2h", "d2d-self"}:
        raise UsageError(f"--device chooses devices for h2d, d2h and d2d-self; with only d2d and {pair_flags[0]} it has nothing to choose")


def _check_id(flag: str, value: int | None) -> int | None:
    if value is not None and value < 0:
        raise UsageError(f"{flag} must be a device id (0 or more), got {value}")
    return value


def _check_dst(src: int | None, dst: int | None) -> int | None:
    _check_id("--dst", dst)
    if src is not None and src == dst:
        raise UsageError(f"--src and --dst are both device {src}; a copy within one device is --direction d2d-self")
    return dst


def _check_count(flag: str, value: int | None, default: int, *, low: int) -> int:
    if value is None:
        return default
    if value < low or value > 1_000_000:
        raise UsageError(f"{flag} must be between {low} and 1000000, got {value}")
    return value


def _check_min_time(value: float | None, default: float) -> float:
    if value is None:
        return default
    if not (0 <= value <= 60):
        raise UsageError(f"--min-time must be between 0 and 60 seconds, got {value:g}")
    return value


_PERCENT_RE = re.compile(r"^\s*(\d{1,6}(?:\.\d{1,6})?)\s*(%?)\s*$", re.ASCII)


def parse_percent(text: str) -> float:
    """--max-regression: '10%', '2.5%', or a bare number of 1 or more read as a percentage.

    A bare number below 1 is the one a user could mean either way ('0.1': a fraction, 10%, or 0.1%),
    so it is refused rather than guessed; '0' is zero either way.
    """
    m_ = _PERCENT_RE.match(text)
    if not m_:
        raise UsageError(f"--max-regression {shown(text)} is not a percentage; give e.g. 10% or 2.5%")
    value = float(m_.group(1))
    if not m_.group(2) and 0 < value < 1:
        raise UsageError(
            f"--max-regression {text!r} is ambiguous: write {value * 100:g}% for a drop of {value * 100:g} percent, "
            f"or {value:g}% for {value:g} percent"
        )
    if value >= 100:
        raise UsageError(f"--max-regression must be at least 0% and below 100%, got {text!r}")
    return value


def check_gate(baseline: str | None, max_regression: str | None) -> tuple[m.Baseline, float] | None:
    if baseline is None:
        if max_regression is not None:
            raise UsageError("--max-regression needs --baseline FILE (an earlier `devctl bench transfer --json` result)")
        return None
    pct = parse_percent(max_regression) if max_regression is not None else DEFAULT_MAX_REGRESSION_PCT
    return load_baseline(baseline), pct


# A baseline is one earlier --json document: a few hundred cells of ~700 bytes; 16 MiB is far above any.
BASELINE_CAP_BYTES = 16 << 20


def load_baseline(path: str) -> m.Baseline:
    """Read, parse and check the baseline once: a regular file, valid JSON, a bench transfer result,
    every cell usable by the gate. Anything else is a one-line UsageError naming the file and the cell."""
    where = f"--baseline {shown(path)}"
    raw = read_input_file("--baseline", path, BASELINE_CAP_BYTES)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte {e.start}); give a `devctl bench transfer --json` result") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to be a `devctl bench transfer --json` result") from None
    except ValueError as e:
        raise UsageError(f"{where} is not JSON ({e}); give a `devctl bench transfer --json` result") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != m.SCHEMA or not isinstance(doc.get("results"), list):
        found = f"schema {shown(schema)}" if isinstance(schema, str) else "no schema field"
        raise UsageError(f"{where} is not a devctl bench transfer result ({found}; expected {m.SCHEMA!r})")
    gbps = {}
    for i, cell in enumerate(doc["results"]):
        problem = _baseline_cell_problem(cell)
        if problem:
            raise UsageError(f"{where}: results[{i}] {problem}; give an unedited `devctl bench transfer --json` result")
        if cell.get("gbps") is not None:
            gbps[tuple(cell[k] for k in _BASELINE_KEY)] = float(cell["gbps"])
    return m.Baseline(path, gbps)


# The fields that name a cell (model.bench.Cell.key), in its order.
_BASELINE_KEY = ("direction", "variant", "layout", "size_bytes", "src", "dst")
_BASELINE_TYPES = {"direction": str, "variant": str, "layout": str, "size_bytes": int, "src": str, "dst": str}


def _baseline_cell_problem(cell) -> str | None:
    """What makes one baseline result unusable for the gate, checked before the benchmark runs."""
    if not isinstance(cell, dict):
        return "is not an object"
    for name, kind in _BASELINE_TYPES.items():
        value = cell.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"has no valid {name!r} ({kind.__name__} expected, got {quoted(value)})"
    if cell["direction"] not in m.DIRECTIONS or cell["layout"] not in m.LAYOUTS:
        return f"has direction {shown(cell['direction'])} and layout {shown(cell['layout'])}, not a devctl cell"
    # Every figure of a cell is a count, a duration or a rate: NaN, an infinity or a negative one was
    # not measured. A NaN gbps would make every comparison false, and so switch the gate off.
    for name, value in cell.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value >= 0):
            return f"has {name} {value!r}, not a measured figure"
    gbps = cell.get("gbps")
    if gbps is not None and (isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or gbps <= 0):
        return f"has gbps {quoted(gbps)}, not a number of GB/s above 0 or null"
    return None


# ---- running -----------------------------------------------------------------------------------


def check_sizes_fit(opts: m.TransferOptions, plan: dict) -> None:
    """A size this machine can never hold is bad input (exit 2), not a run of skipped cells that exits 0.

    Host: the probe's measured peak for this run (model.bench.host_bytes_needed) against the machine's
    memory. A device that reports its bytes_limit must hold one copy of its share of the size.
    """
    from devctl.units import format_bytes, format_size_short

    if opts.sizes_bytes is None:
        return  # the default sweep: the probe itself leaves out what does not fit, and says so
    devices = [d for d in plan.get("devices") or [] if isinstance(d, dict)]
    in_host = any(d.get("platform") == "cpu" for d in devices)
    from devctl.discovery.host import host_memory_limit

    limit, what = host_memory_limit()
    for size in opts.sizes_bytes:
        need = m.host_bytes_needed(opts, size, devices_in_host_memory=in_host, device_count=max(len(devices), 1))
        if limit is not None and need > limit:
            copies = need // size
            largest = _largest_fitting(limit // copies)
            raise UsageError(
                f"--sizes {format_size_short(size)} needs about {format_bytes(need)} of host memory for this run "
                f"({copies}x the size at its peak), more than {what} ({format_bytes(limit)}); "
                f"give sizes up to {largest}"
            )
        for d in devices:
            share = size // len(devices) if opts.layouts == ("sharded",) else size
            cap = d.get("bytes_limit")
            if isinstance(cap, int) and cap > 0 and share > cap:
                raise UsageError(
                    f"--sizes {format_size_short(size)} does not fit in {d.get('name')}: its bytes_limit is {format_bytes(cap)}"
                )


def _largest_fitting(n: int) -> str:
    from devctl.units import format_size_short

    power = 1 << max(n.bit_length() - 1, 0)  # the largest power of two that fits: the sizes people pass
    return format_size_short(power)


def _with_gate(report: m.TransferReport, baseline: m.Baseline, pct: float) -> m.TransferReport:
    from dataclasses import replace

    gate = m.compare_with_baseline(report.results, baseline, pct)
    if gate.compared == 0:
        raise UsageError(
            f"--baseline {shown(baseline.name)} has no cell matching this run (direction, variant, layout, size, src, dst); "
            "create it with the same options"
        )
    return replace(report, gate=gate)


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _run(opts: m.TransferOptions, timeout_s: float) -> m.TransferReport:
    """The benchmark, with a progress bar on a terminal; --sizes is checked against the machine as soon as
    the child has said what it will measure on, before it allocates anything."""
    from devctl.collect.bench import run_transfer
    from devctl.render.bench import Progress

    with Progress() as progress:
        return run_transfer(opts, timeout_s, on_event=progress.on_event, check_plan=lambda plan: check_sizes_fit(opts, plan))
