"""--baseline of every bench command: earlier --json results read, checked and pooled, and the report judged."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any, TypeVar

from devctl.errors import InputRejected
from devctl.model.gate import GATE_LEFT_OUT_WORDS, Baseline, GateRequest, GateSpec, judge, pool
from devctl.text import quoted, shown

R = TypeVar("R")

# What the gate needs of a measured cell besides its figure: its samples' spread (model.gate.noise_pct).
_SPREAD = ("p10_s", "median_s", "p90_s")


def read_baselines(files: list[tuple[str, bytes]], spec: GateSpec, max_regression_pct: float, all_sizes: bool = False) -> GateRequest:
    """The request from each --baseline file (its name as given, its bytes), runs pooled. The same run given twice
    (another name for the file, ./x or a link; a copy) would pool as two that agree exactly: refused."""
    baselines = [read_baseline(name, raw, spec) for name, raw in files]
    for i, b in enumerate(baselines):
        same = next((earlier for earlier in baselines[:i] if earlier.figures == b.figures), None)
        if same is not None:
            raise InputRejected(f"--baseline {shown(b.name)} holds the same figures as {shown(same.name)}: one run given twice; "
                                "pool different runs (each run's own --json result)")  # fmt: skip
    return GateRequest(pool(baselines), max_regression_pct, all_sizes)


def read_baseline(path: str, raw: bytes, spec: GateSpec) -> Baseline:
    """One earlier `devctl <bench> --json` document (schema version 1 too: its cells carry the same figures)."""
    from devctl.model import from_dict

    where = f"--baseline {shown(path)}"
    give = f"give a `devctl {spec.command} --json` result"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputRejected(f"{where} is not UTF-8 text (byte {e.start}); {give}") from None
    except RecursionError:
        raise InputRejected(f"{where} is nested too deeply to be a `devctl {spec.command} --json` result") from None
    except ValueError as e:
        raise InputRejected(f"{where} is not JSON ({e}); {give}") from None
    found_schema = doc.get("schema") if isinstance(doc, dict) else None
    accepted = (spec.schema, spec.schema.rsplit("/", 1)[0] + "/1")
    if found_schema not in accepted:
        found = f"schema {shown(found_schema)}" if isinstance(found_schema, str) else "no schema field"
        raise InputRejected(f"{where} is not a devctl {spec.command} result ({found}; expected {spec.schema!r})")
    if not isinstance(doc.get("results"), list):
        raise InputRejected(f"{where} has no list of results; {give}")
    devices = doc.get("devices")
    kinds = {d["name"]: d["device_kind"] for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)
             and isinstance(d.get("device_kind"), str)} if isinstance(devices, list) else {}  # fmt: skip
    figures = {}
    for i, cell in enumerate(doc["results"]):
        problem = _cell_problem(cell, spec)
        if problem is None and cell.get(spec.value) is not None:
            try:
                f = spec.figure(from_dict(spec.cell_type, cell))
            except (TypeError, ValueError, KeyError) as e:
                problem = f"is not a {spec.command} cell ({e})"
            else:
                figures[f.key] = f
        if problem:
            raise InputRejected(f"{where}: results[{i}] {problem}; give an unedited `devctl {spec.command} --json` result")
    return Baseline(path, figures, device_kinds=kinds)


def _cell_problem(cell: Any, spec: GateSpec) -> str | None:
    """What makes one baseline result unusable for the gate, checked before the benchmark runs."""
    if not isinstance(cell, dict):
        return "is not an object"
    for name, kind in spec.key_fields.items():
        value = cell.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"has no valid {name!r} (got {quoted(value)})"
    if cell.get("verified") is False and cell.get(spec.value) is not None:
        return "is a result that failed its verification (the bytes or values were wrong): no bar to hold a run to"
    return spec.check_cell(cell) or _figure_problem(cell, spec.value, spec.unit)


def _figure_problem(cell: dict, name: str, unit: str) -> str | None:
    """What makes a result's figure (GB/s, TFLOP/s) unusable: not a number above 0 or null, or no samples' spread."""
    # Every figure of a cell is a count, a duration or a rate: NaN, an infinity or a negative one was
    # not measured. A NaN figure would make every comparison false, and so switch the gate off.
    for key, value in cell.items():
        if _is_number(value) and not _measured(value):
            return f"has {key} {quoted(value)}, not a measured figure"
    value = cell.get(name)
    if value is not None and (not _is_number(value) or value <= 0):
        return f"has {name} {quoted(value)}, not a number of {unit} above 0 or null"
    if value is None:
        return None
    # The gate judges a cell against the spread of its samples: a result without it (written by hand, or by a
    # devctl before the spread was recorded) cannot be judged honestly, so it is refused, not judged without it.
    samples = cell.get("samples")
    spread = [cell.get(k) for k in _SPREAD]
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1 or not all(_is_number(v) for v in spread):
        return "has a bandwidth but no samples, p10_s, median_s and p90_s (the gate judges each cell against the spread of its samples)"
    p10, mid, p90 = (float(v) for v in spread)  # type: ignore[arg-type]  # each a number: checked above
    if not (0 < p10 <= mid <= p90):
        return f"has p10_s {p10!r}, median_s {mid!r}, p90_s {p90!r}, not in order above 0"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _measured(value: int | float) -> bool:
    """A count, duration or rate a run could have measured: 0 or more, finite (an int past a float's range, 1e400
    written out, is no figure either, and float() of it would raise)."""
    if isinstance(value, int):
        return 0 <= value < 1 << 63
    return math.isfinite(value) and value >= 0


def judged(report: R, request: GateRequest | None, spec: GateSpec) -> R:
    """The report judged against --baseline (unchanged without one)."""
    if request is None:
        return report
    from devctl.text import printable

    cells = report.results  # type: ignore[attr-defined]  # every bench report has its cells as results
    gate = judge(
        [spec.figure(c) for c in cells], request.baseline, request.max_regression_pct, spec.unit, spec.rule,
        all_sizes=request.all_sizes,
    )  # fmt: skip
    name = printable(repr(request.baseline.name), 120)
    ran = {d.name: d.device_kind for d in report.devices}  # type: ignore[attr-defined]  # every bench report has its devices
    other = sorted({(n, k, ran[n]) for n, k in request.baseline.device_kinds.items() if n in ran and ran[n] != k})
    if other:
        n, then, now = other[0]
        raise InputRejected(f"--baseline {name} was measured on {then!r} ({n}), this run on {now!r}: a baseline holds for "
                            "one kind of device; record one on this machine")  # fmt: skip
    if gate.compared == 0:
        raise InputRejected(f"--baseline {name} has no cell matching this run; create it with the same `devctl {spec.command}` options")
    if gate.gated == 0:
        own = {k: n for k, n in gate.left_out.items() if k in GATE_LEFT_OUT_WORDS}
        if own:
            why = "; ".join(GATE_LEFT_OUT_WORDS[k].format(n=n) for k, n in own.items())
            raise InputRejected(f"--baseline {name}: none of the {gate.compared} matching cells can be gated: {why}")
        more = f", or give {spec.all_sizes_flag}" if spec.all_sizes_flag else ""
        raise InputRejected(f"--baseline {name}: none of the {gate.compared} matching cells {spec.nothing_judged}{more}")
    return replace(report, gate=gate)  # type: ignore[type-var]  # every bench report is a dataclass with a gate field
