"""--baseline FILE, --max-regression PCT and --gate-all-sizes of `devctl bench transfer`: the gate, read and checked
before the benchmark runs.

The comparison itself is model.bench.compare_with_baseline; a baseline that shares no cell with the run is
refused by collect.bench once the cells are known.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional

import typer

from devctl.cli import completion
from devctl.cli.options import quoted, read_input_file, shown
from devctl.errors import UsageError
from devctl.model import bench as m
from devctl.model import gate

DEFAULT_MAX_REGRESSION_PCT = 10.0

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
BenchBaselineOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--baseline",
        metavar="FILE",
        autocompletion=completion.files,
        help="An earlier --json result of this command (a regular file): exit 1 if a cell's figure fell below it by more than "
        "its noise and --max-regression. Repeat it to pool several runs (3 or more recommended).",
    ),
]

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


def check_gate(baselines: list[str] | None, max_regression: str | None, all_sizes: bool = False) -> m.GateRequest | None:
    """The baseline (several runs pooled when --baseline is repeated), the drop allowed beyond its noise band, in
    percent, and which cells to judge; None without --baseline."""
    if not baselines:
        given = "--max-regression" if max_regression is not None else "--gate-all-sizes" if all_sizes else None
        if given:
            raise UsageError(f"{given} needs --baseline FILE (an earlier `devctl bench transfer --json` result)")
        return None
    pct = parse_percent(max_regression) if max_regression is not None else DEFAULT_MAX_REGRESSION_PCT
    _refuse_twice(baselines)
    return m.GateRequest(m.pooled([load_baseline(path) for path in baselines]), pct, all_sizes)


# A baseline is one earlier --json document: a few hundred cells of ~700 bytes; 16 MiB is far above any.
BASELINE_CAP_BYTES = 16 << 20


def load_baseline(path: str) -> m.Baseline:
    """Read, parse and check the baseline once: a regular file, valid JSON, a bench transfer result,
    every cell usable by the gate. Anything else is a one-line UsageError naming the file and the cell."""
    where = f"--baseline {shown(path)}"
    doc = _read_result(path, "bench transfer", m.SCHEMA)
    cells = {}
    for i, cell in enumerate(doc["results"]):
        problem = _baseline_cell_problem(cell)
        if problem:
            raise UsageError(f"{where}: results[{i}] {problem}; give an unedited `devctl bench transfer --json` result")
        if cell.get("gbps") is not None:
            c = m.Cell(
                cell["direction"], cell["variant"], cell["layout"], cell["size_bytes"], cell["src"], cell["dst"],
                samples=cell["samples"],
                p10_s=float(cell["p10_s"]),
                median_s=float(cell["median_s"]),
                p90_s=float(cell["p90_s"]),
                gbps=float(cell["gbps"]),
            )
            cells[c.key] = c
    return m.Baseline(path, cells)


# The fields that name a cell (model.bench.Cell.key), in its order.
_BASELINE_TYPES = {"direction": str, "variant": str, "layout": str, "size_bytes": int, "src": str, "dst": str}
# What the gate needs of a measured cell besides its GB/s: its samples' spread (model.bench.noise_pct).
_SPREAD = ("p10_s", "median_s", "p90_s")


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
    return _figure_problem(cell, "gbps", "GB/s")


def _figure_problem(cell: dict, name: str, unit: str) -> str | None:
    """What makes a result's figure (GB/s, TFLOP/s) unusable: not a number above 0 or null, or no samples' spread."""
    # Every figure of a cell is a count, a duration or a rate: NaN, an infinity or a negative one was
    # not measured. A NaN figure would make every comparison false, and so switch the gate off.
    for key, value in cell.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value) and value >= 0):
            return f"has {key} {value!r}, not a measured figure"
    value = cell.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        return f"has {name} {quoted(value)}, not a number of {unit} above 0 or null"
    if value is None:
        return None
    # The gate judges a cell against the spread of its samples: a result without it (written by hand, or by a
    # devctl before the spread was recorded) cannot be judged honestly, so it is refused, not judged without it.
    samples = cell.get("samples")
    spread = [cell.get(k) for k in _SPREAD]
    if not _is_number(samples) or not isinstance(samples, int) or samples < 1 or not all(_is_number(v) for v in spread):
        return "has a bandwidth but no samples, p10_s, median_s and p90_s (the gate judges each cell against the spread of its samples)"
    p10, median, p90 = (float(v) for v in spread)  # type: ignore[arg-type]  # each a number: checked above
    if not (0 < p10 <= median <= p90):
        return f"has p10_s {p10!r}, median_s {median!r}, p90_s {p90!r}, not in order above 0"
    return None


def _read_result(path: str, command: str, schema: str) -> dict:
    """An earlier `devctl COMMAND --json` document: a regular file, UTF-8 JSON, of `schema`, with a results list."""
    where = f"--baseline {shown(path)}"
    give = f"give a `devctl {command} --json` result"
    raw = read_input_file("--baseline", path, BASELINE_CAP_BYTES)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{where} is not UTF-8 text (byte {e.start}); {give}") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to be a `devctl {command} --json` result") from None
    except ValueError as e:
        raise UsageError(f"{where} is not JSON ({e}); {give}") from None
    found_schema = doc.get("schema") if isinstance(doc, dict) else None
    # Version 1 cells carry the same figures and spread; only `method` and the overhead fields came with 2.
    accepted = (schema, schema.rsplit("/", 1)[0] + "/1")
    if found_schema not in accepted or not isinstance(doc.get("results"), list):
        found = f"schema {shown(found_schema)}" if isinstance(found_schema, str) else "no schema field"
        raise UsageError(f"{where} is not a devctl {command} result ({found}; expected {schema!r})")
    return doc


# ---- bench memory, matmul and collective: the same gate over their cells (devctl.model.gate) --------------


@dataclass(frozen=True)
class BenchBaselineSpec:
    """What one bench's results look like to the gate."""

    command: str  # "bench memory"
    schema: str
    cell_type: type  # its cell dataclass
    key_fields: dict[str, Any]  # field -> the type(s) it must have: what identifies a cell from run to run
    value: str  # the figure judged ("gbps", "tflops", "busbw_gbps")
    unit: str
    figure: Callable[[Any], gate.Figure]


def check_bench_gate(baselines: list[str] | None, max_regression: str | None, spec: BenchBaselineSpec) -> gate.BenchGateRequest | None:
    """--baseline (repeatable, runs pooled) and --max-regression of bench memory, matmul or collective; None without --baseline."""
    if not baselines:
        if max_regression is not None:
            raise UsageError(f"--max-regression needs --baseline FILE (an earlier `devctl {spec.command} --json` result)")
        return None
    pct = parse_percent(max_regression) if max_regression is not None else DEFAULT_MAX_REGRESSION_PCT
    _refuse_twice(baselines)
    return gate.BenchGateRequest(gate.pool([load_bench_baseline(path, spec) for path in baselines]), pct)


def load_bench_baseline(path: str, spec: BenchBaselineSpec) -> gate.Baseline:
    from devctl.model import from_dict

    where = f"--baseline {shown(path)}"
    doc = _read_result(path, spec.command, spec.schema)
    figures = {}
    for i, cell in enumerate(doc["results"]):
        problem = _bench_cell_problem(cell, spec)
        if problem:
            raise UsageError(f"{where}: results[{i}] {problem}; give an unedited `devctl {spec.command} --json` result")
        if cell.get(spec.value) is not None:
            f = spec.figure(from_dict(spec.cell_type, cell))
            figures[f.key] = f
    return gate.Baseline(path, figures)


def _bench_cell_problem(cell, spec: BenchBaselineSpec) -> str | None:
    if not isinstance(cell, dict):
        return "is not an object"
    for name, kind in spec.key_fields.items():
        value = cell.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"has no valid {name!r} (got {quoted(value)})"
    return _figure_problem(cell, spec.value, spec.unit)


def _refuse_twice(baselines: list[str]) -> None:
    for i, path in enumerate(baselines):
        if path in baselines[:i]:
            raise UsageError(f"--baseline {shown(path)} is given twice; pool different runs (each run's own --json result)")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bench_spec(command: str) -> BenchBaselineSpec:
    """The gate's view of `bench memory`, `bench matmul` or `bench collective` results."""
    if command == "bench memory":
        from devctl.model import bench_memory as mem

        return BenchBaselineSpec(command, mem.SCHEMA, mem.MemoryCell, mem.GATE_KEY_FIELDS, "gbps", mem.GATE_UNIT, mem.gate_figure)
    if command == "bench matmul":
        from devctl.model import bench_matmul as mm

        return BenchBaselineSpec(command, mm.SCHEMA, mm.MatmulCell, mm.GATE_KEY_FIELDS, "tflops", mm.GATE_UNIT, mm.gate_figure)
    from devctl.model import bench_collective as coll

    return BenchBaselineSpec(command, coll.SCHEMA, coll.CollectiveCell, coll.GATE_KEY_FIELDS, "busbw_gbps", coll.GATE_UNIT, coll.gate_figure)


def judged(report, request: gate.BenchGateRequest | None, spec: BenchBaselineSpec, gated: Callable[[gate.Figure], bool] = lambda f: True):
    """The report judged against --baseline (unchanged without one)."""
    if request is None:
        return report
    from devctl.collect.gate import with_gate

    return with_gate(report, request, [spec.figure(c) for c in report.results], spec.unit, spec.command, gated)


def say_gate(report, left_out: str = "latency cells") -> bool:
    """The gate's verdict on stderr; whether it passed (True without --baseline)."""
    if report.gate is None:
        return True
    import sys

    from devctl.render.gate import gate_lines

    for line in gate_lines(report.gate, left_out):
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    return bool(report.gate.passed)
