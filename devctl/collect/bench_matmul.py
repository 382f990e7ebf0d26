"""`devctl bench matmul`: run the measuring child (devctl.probe.bench_matmul) and assemble its events into a report,
every device compared dtype by dtype with its published dense peak and with its peers."""

from __future__ import annotations

from typing import Callable

from devctl.model import bench_matmul as m
from devctl.model.bench import Comparison, best_by_device, compare, fastest_by_device

PROBE_MODULE = "devctl.probe.bench_matmul"
# Which published figure each dtype is set against (devctl.model.peaks): f32 runs at Precision.HIGHEST, FP32 math.
ROOF_FIELD = {"bf16": "bf16_tflops", "f32": "f32_tflops"}
ROOF_WORDS = {"bf16": "dense BF16", "f32": "FP32 (non-tensor)"}


def run_matmul(opts: m.MatmulOptions, timeout_s: float, *, on_event: Callable[[dict], None] | None = None) -> m.MatmulReport:
    from devctl.collect.bench import run_probe

    result = run_probe(PROBE_MODULE, opts.to_request(), timeout_s, "bench matmul", on_event)
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.MatmulReport:
    from devctl.collect.bench import devices_of, environment_of
    from devctl.model import from_dict

    devices = devices_of(events)
    order = {d.name: i for i, d in enumerate(devices)}
    measured = [from_dict(m.MatmulCell, e) for e in events if e.get("event") == "cell"]
    dtypes = list(dict.fromkeys(c.dtype for c in measured))
    # The child measures group by group (every device taking turns); a reader compares a device's rows: by device.
    cells = tuple(sorted(measured, key=lambda c: (order.get(c.device, len(order)), dtypes.index(c.dtype), c.n)))
    comparisons = tuple(_compare(dtype, [c for c in cells if c.dtype == dtype], devices) for dtype in dtypes)
    return m.MatmulReport(cells, comparisons, devices, environment_of(events, elapsed_s), m.METHOD)


def _compare(dtype: str, cells: list[m.MatmulCell], devices) -> Comparison:
    from devctl.collect.bench import roof_words

    roofs, name, source, reason = roof_words(devices, lambda p: getattr(p, ROOF_FIELD[dtype]))
    return compare(
        dtype,
        "TFLOP/s",
        best_by_device(cells, lambda c: c.tflops, lambda c: c.n),
        {d.name: d.device_kind for d in devices},
        roofs,
        fastest=fastest_by_device(cells, lambda c: c.peak_tflops),
        roof_name=f"{name} {ROOF_WORDS[dtype]}" if name else None,
        roof_source=source,
        roof_reason=reason,
    )
