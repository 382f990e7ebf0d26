"""`devctl bench`: benchmarks of the paths a JAX program uses.

`devctl bench transfer` validates every flag here, in the CLI process, before
a probe child (devctl/probe/transfer.py) imports jax and measures. Only light
modules are imported at the top: `devctl --help` must not pay for jax.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from devctl.cli.options import JsonOpt, check_timeout
from devctl.errors import DevctlError, UsageError
from devctl.model import bench as m

bench_app = typer.Typer(help="Benchmarks of the paths a JAX program uses.", no_args_is_help=True)

PROBE_MODULE = "devctl.probe.transfer"
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
    Option("--sizes", metavar="LIST", help="e.g. 4K,1M,64M,1G. Default: 4K to 256M (1G where the device has room)."),
]
QuickOpt = Annotated[bool, Option("--quick", help="A few sizes and a short budget: a smoke test in seconds.")]
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
ShardedOpt = Annotated[bool, Option("--sharded", help="One array sharded over all local devices (aggregate bandwidth).")]
ReplicatedOpt = Annotated[bool, Option("--replicated", help="One array replicated on every local device.")]
DeviceOpt = Annotated[
    Optional[list[str]],
    Option("--device", metavar="ID", help="Device(s) for h2d, d2h and d2d-self: ids or all. Default: the first."),
]
SrcOpt = Annotated[Optional[int], Option("--src", metavar="ID", help="d2d: the source device.")]
DstOpt = Annotated[Optional[int], Option("--dst", metavar="ID", help="d2d: the destination device.")]
AllPairsOpt = Annotated[bool, Option("--all-pairs", help="d2d: every ordered pair of devices at every size.")]
BaselineOpt = Annotated[
    Optional[str], Option("--baseline", metavar="FILE", help="An earlier --json result: exit 1 if a cell fell below it.")
]
MaxRegressionOpt = Annotated[
    Optional[str],
    Option("--max-regression", metavar="PCT", help="Allowed drop below the baseline per cell (default 10%)."),
]
WatchdogOpt = Annotated[
    Optional[float],
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
    gate_args = check_gate(baseline, max_regression)
    timeout_s = check_timeout(timeout)
    report = run_transfer(opts, timeout_s)
    code = 0
    if gate_args is not None:
        report = _with_gate(report, *gate_args)
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
    return m.TransferOptions(
        directions=directions,
        variants=parse_variants(variants, directions),
        layouts=tuple(name for name, on in (("sharded", sharded), ("replicated", replicated)) if on) or ("single",),
        sizes_bytes=parse_sizes(sizes) if sizes is not None else None,
        devices=parse_devices(device),
        src=_check_id("--src", src),
        dst=_check_dst(src, dst),
        all_pairs=all_pairs,
        repeats=_check_count("--repeats", repeats, m.QUICK_REPEATS if quick else m.DEFAULT_REPEATS, low=1),
        min_time_s=_check_min_time(min_time, m.QUICK_MIN_TIME_S if quick else m.DEFAULT_MIN_TIME_S),
        warmups=_check_count("--warmups", warmups, m.QUICK_WARMUPS if quick else m.DEFAULT_WARMUPS, low=0),
        verify=verify,
        quick=quick,
    )


def _split(items: list[str] | None) -> list[str]:
    return [p.strip() for item in items or [] for p in item.split(",") if p.strip()]


def parse_directions(items: list[str] | None) -> tuple[str, ...]:
    names = [n.lower() for n in _split(items)]
    if not names or "all" in names:
        return m.DIRECTIONS
    for n in names:
        if n not in m.DIRECTIONS:
            raise UsageError(f"unknown --direction {n!r}; accepted: {', '.join(m.DIRECTIONS)}, all")
    return tuple(d for d in m.DIRECTIONS if d in names)


def parse_variants(text: str, directions: tuple[str, ...]) -> tuple[str, ...] | None:
    names = [n.lower() for n in _split([text])]
    if not names or names == ["main"]:
        return None
    if "all" in names:
        return m.ALL_VARIANTS
    for n in names:
        if n == "main":
            continue
        if n not in m.ALL_VARIANTS:
            raise UsageError(f"unknown --variants name {n!r}; accepted: main, all, {', '.join(m.ALL_VARIANTS)}")
        if not any(n in m.VARIANTS[d] for d in directions):
            offers = "; ".join(f"{d}: {', '.join(m.VARIANTS[d])}" for d in directions)
            raise UsageError(f"--variants {n!r} applies to none of the directions measured ({offers})")
    chosen = set(names)
    if "main" in chosen:
        chosen |= {m.main_variant(d) for d in directions}
    return tuple(v for v in m.ALL_VARIANTS if v in chosen)


def parse_sizes(text: str) -> tuple[int, ...]:
    from devctl.units import parse_size

    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise UsageError("--sizes is empty; give sizes such as 4K,1M,64M,1G")
    out = set()
    for p in parts:
        if not p:
            raise UsageError(f"--sizes {text!r} has an empty entry; give sizes such as 4K,1M,64M,1G")
        try:
            n = parse_size(p)
        except ValueError as e:
            raise UsageError(f"--sizes: {e}") from None
        if n <= 0:
            raise UsageError(f"--sizes: a size must be at least 1 byte, got {p!r}")
        out.add(n)
    return tuple(sorted(out))


def parse_devices(items: list[str] | None) -> tuple[int, ...] | None:
    names = _split(items)
    if not names:
        return None
    if any(n.lower() == "all" for n in names):
        return ()
    ids = []
    for n in names:
        if not n.isdigit():
            raise UsageError(f"--device {n!r} is not a device id; give a number such as 0, or all")
        ids.append(int(n))
    return tuple(dict.fromkeys(ids))


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


def parse_percent(text: str) -> float:
    raw = text.strip().rstrip("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"--max-regression {text!r} is not a percentage; give e.g. 10%") from None
    if not (0 <= value < 100):
        raise UsageError(f"--max-regression must be at least 0% and below 100%, got {text!r}")
    return value


def check_gate(baseline: str | None, max_regression: str | None) -> tuple[list[dict], str, float] | None:
    if baseline is None:
        if max_regression is not None:
            raise UsageError("--max-regression needs --baseline FILE (an earlier `devctl bench transfer --json` result)")
        return None
    pct = parse_percent(max_regression) if max_regression is not None else DEFAULT_MAX_REGRESSION_PCT
    return load_baseline(baseline), baseline, pct


def load_baseline(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"--baseline {path!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--baseline {path!r} cannot be read: {e}") from None
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise UsageError(f"--baseline {path!r} is not JSON ({e}); give a `devctl bench transfer --json` result") from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema != m.SCHEMA or not isinstance(doc.get("results"), list):
        found = f"schema {schema!r}" if schema else "no schema field"
        raise UsageError(f"--baseline {path!r} is not a devctl bench transfer result ({found}; expected {m.SCHEMA!r})")
    for i, r in enumerate(doc["results"]):
        problem = _baseline_cell_problem(r)
        if problem:
            raise UsageError(f"--baseline {path!r}: results[{i}] {problem}; give an unedited `devctl bench transfer --json` result")
    return doc["results"]


_BASELINE_FIELDS = {"direction": str, "variant": str, "size_bytes": int, "src": str, "dst": str}


def _baseline_cell_problem(cell) -> str | None:
    """What makes one baseline result unusable for the gate, checked before the benchmark runs."""
    if not isinstance(cell, dict):
        return "is not an object"
    for name, kind in _BASELINE_FIELDS.items():
        if not isinstance(cell.get(name), kind) or isinstance(cell.get(name), bool):
            return f"has no valid {name!r} ({kind.__name__} expected, got {cell.get(name)!r})"
    gbps = cell.get("gbps")
    if gbps is not None and (isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or gbps < 0):
        return f"has gbps {gbps!r}, not a number of GB/s or null"
    return None


# ---- running -----------------------------------------------------------------------------------


def run_transfer(opts: m.TransferOptions, timeout_s: float) -> m.TransferReport:
    """Run the probe child and assemble its events into a report."""
    from devctl.probe.runner import run_child

    with _Progress() as progress:
        result = run_child(PROBE_MODULE, opts.to_request(), timeout_s=timeout_s, on_event=progress.on_event)
    error = result.last("error")
    if error is not None:
        if error.get("kind") == "usage":
            raise UsageError(error.get("message", "bad input"))
        raise DevctlError(f"bench transfer: {error.get('message', 'the probe failed')}")
    done = result.last("done")
    plan = result.last("plan")
    if done is None or plan is None:
        raise DevctlError(f"bench transfer: the benchmark process {result.failure_text()}")
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.TransferReport:
    from devctl import __version__

    plan = next(e for e in events if e.get("event") == "plan")
    done = next(e for e in reversed(events) if e.get("event") == "done")
    cells = tuple(m.cell_from_dict(e) for e in events if e.get("event") == "cell")
    memcpy = tuple(
        m.MemcpyRoof(e["size_bytes"], e["samples"], e["median_s"], e["gbps"], e.get("note"))
        for e in events
        if e.get("event") == "roof"
    )
    pcie = tuple(m.PcieLink(**link) for link in done.get("pcie", []))
    devices = tuple(m.DeviceInfo(**{**d, "memory_kinds": tuple(d.get("memory_kinds", ()))}) for d in plan["devices"])
    environment = {**plan.get("environment", {}), "devctl": __version__, "child_elapsed_s": done.get("elapsed_s")}
    if elapsed_s is not None:
        environment["elapsed_s"] = round(elapsed_s, 3)
    return m.TransferReport(
        results=cells,
        roofs=m.Roofs(host_memcpy=memcpy, pcie=pcie, pcie_reason=done.get("pcie_reason")),
        fastest=m.fastest_paths(cells),
        devices=devices,
        environment=environment,
    )


def _with_gate(report: m.TransferReport, baseline: list[dict], name: str, pct: float) -> m.TransferReport:
    from dataclasses import replace

    gate = m.compare_with_baseline(report.results, baseline, pct, name)
    if gate.compared == 0:
        raise UsageError(
            f"--baseline {name!r} has no cell matching this run (direction, variant, layout, size, src, dst); "
            "create it with the same options"
        )
    return replace(report, gate=gate)


def _stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


class _Progress:
    """A progress bar on stderr while cells complete, only when stderr is a terminal."""

    def __init__(self):
        self._bar = None
        self._task = None

    def __enter__(self) -> _Progress:
        if sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from devctl.render.console import err

            self._bar = Progress(
                TextColumn("{task.description}", markup=False),  # the label carries device and variant names
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting jax", total=None)
        return self

    def on_event(self, event: dict) -> None:
        if self._bar is None:
            return
        kind = event.get("event")
        if kind == "plan":
            self._bar.update(self._task, total=event.get("cells"), description="measuring")
        elif kind == "cell":
            label = f"{event.get('direction')} {event.get('variant')} {_short(event.get('size_bytes'))}"
            self._bar.update(self._task, advance=1, description=label)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def _short(n) -> str:
    from devctl.units import format_size_short

    return format_size_short(n) if isinstance(n, int) else "?"
