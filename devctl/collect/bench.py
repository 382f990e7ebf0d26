"""What every bench's collector shares: running its probe child, turning its failures into one-line errors, the
devices and the run's environment as the report carries them; and, for the per-device benches (`bench memory`,
`bench matmul`), their cells compared with each device's roof and its peers."""

from __future__ import annotations

from typing import Any, Callable, Iterable

from devctl.errors import DevctlError, InputRejected
from devctl.model.bench import BenchDevice, Comparison, compare
from devctl.model.peaks import no_peak_reason, peak_for


def run_probe(module: str, request: dict, timeout_s: float, command: str, on_event: Callable[[dict], None] | None,
              check: Callable[[Any], None] | None = None):  # fmt: skip
    """The child's ChildResult; bad input only the child could see (a device this machine lacks) is InputRejected
    (exit 2), any other failure a DevctlError naming the command. `check(result)` may raise its own, after the
    child's error and before a missing plan or end."""
    from devctl.probe.runner import run_child

    result = run_child(module, request, timeout_s=timeout_s, on_event=on_event)
    error = result.last("error")
    if error is not None:
        if error.get("kind") == "usage":
            raise InputRejected(error.get("message", "bad input"))
        raise DevctlError(f"{command}: {error.get('message', 'the probe failed')}")
    if check is not None:
        check(result)
    if result.last("done") is None or result.last("plan") is None:
        from devctl.probe.runner import last_word

        where = f" (--timeout; {last_word(result.events)})" if result.timed_out else ""
        raise DevctlError(f"{command}: the benchmark process {result.failure_text()}{where}")
    return result


def devices_of(events: list[dict]) -> tuple[BenchDevice, ...]:
    from devctl.model import from_dict

    plan = next(e for e in events if e.get("event") == "plan")
    return tuple(from_dict(BenchDevice, d) for d in plan["devices"])


def environment_of(events: list[dict], elapsed_s: float | None, **extra: Any) -> Any:
    """The run's environment: the child's plan carries every key of the bench's environment type but devctl's own
    (its version, the child's and the whole run's wall time) and `extra` (what the child only knows at its end)."""
    from devctl.version import __version__

    plan = next(e for e in events if e.get("event") == "plan")
    done = next(e for e in reversed(events) if e.get("event") == "done")
    env = {**plan.get("environment", {}), **extra, "devctl": __version__, "child_elapsed_s": done.get("elapsed_s")}
    if elapsed_s is not None:
        env["elapsed_s"] = round(elapsed_s, 3)
    return env


def cells_of(events: list[dict], cell_type: type, devices: tuple[BenchDevice, ...], order: Callable[[Any], Any]) -> tuple:
    """The child's cells, by device (the order it lists them), then by `order`: the child measures group by group,
    every device taking turns; a reader compares one device's rows."""
    from devctl.model import from_dict

    index = {d.name: i for i, d in enumerate(devices)}
    cells: list[Any] = [from_dict(cell_type, e) for e in events if e.get("event") == "cell"]
    return tuple(sorted(cells, key=lambda c: (index.get(c.device, len(index)), order(c))))


def compare_cells(
    metric: str, unit: str, cells: Iterable[Any], devices: tuple[BenchDevice, ...], fields: tuple[str, str],
    size_of: Callable[[Any], int], roof_of: Callable[[Any], float | None], roof_what: str,
) -> Comparison:  # fmt: skip
    """Every device's best figure (`fields`: the figure and its fastest sample's) against its roof (`roof_of` a
    device kind's peak) and its peers."""
    value, fastest = fields
    best: dict[str, tuple[float | None, int | None]] = {}  # per device, in the order first seen: its best figure and its size
    fast: dict[str, float | None] = {}  # per device: the figure of its fastest call, at any size
    for c in cells:
        v, f = getattr(c, value), getattr(c, fastest)
        held = best.setdefault(c.device, (None, None))[0]
        if v is not None and (held is None or v > held):
            best[c.device] = (v, size_of(c))
        fast[c.device] = max(f, fast.get(c.device) or 0) if f else fast.get(c.device)
    roofs: dict[str, float | None] = {}
    names, sources, reasons = [], [], []
    for d in devices:
        peak = peak_for(d.device_kind)
        roof = roofs[d.name] = roof_of(peak) if peak is not None else None
        if roof is not None and peak is not None:
            names.append(peak.name)
            sources.append(peak.source)
        elif peak is not None:
            reasons.append(f"{peak.name} ({peak.source}) publishes no such figure")
        else:
            reasons.append(no_peak_reason(d.device_kind, d.platform))
    first = lambda items: ", ".join(dict.fromkeys(items)) or None  # noqa: E731
    name = first(names)
    return compare(
        metric,
        unit,
        best,
        {d.name: d.device_kind for d in devices},
        roofs,
        fastest=fast,
        roof_name=f"{name} {roof_what}" if name else None,
        roof_source=first(sources),
        roof_reason=first(reasons),
    )


def chip_runner(module: str, command: str, assemble: Callable[..., Any]) -> Callable[..., Any]:
    """`bench memory`'s and `bench matmul`'s run: the probe child `module`, its events assembled into a report."""

    def run(opts: Any, timeout_s: float, *, on_event: Callable[[dict], None] | None = None) -> Any:
        result = run_probe(module, opts.to_request(), timeout_s, command, on_event)
        return assemble(result.events, elapsed_s=result.elapsed_s)

    return run
