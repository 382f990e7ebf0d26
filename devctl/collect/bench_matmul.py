"""`devctl bench matmul`: run the measuring child (devctl.probe.bench_matmul) and assemble its events into a report,
every device compared dtype by dtype with its published dense peak and with its peers."""

from __future__ import annotations

from devctl.collect.bench import cells_of, chip_runner, compare_cells, devices_of, environment_of
from devctl.model import bench_matmul as m
from devctl.model.bench import Comparison

ROOF_WORDS = {"bf16": "dense BF16", "f32": "FP32 (non-tensor)"}


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.MatmulReport:
    devices = devices_of(events)
    dtypes: list[str] = list(dict.fromkeys(str(e.get("dtype")) for e in events if e.get("event") == "cell"))
    cells = cells_of(events, m.MatmulCell, devices, lambda c: (dtypes.index(c.dtype), c.n))
    comparisons = tuple(_compare(dtype, cells, devices) for dtype in dtypes)
    return m.MatmulReport(cells, comparisons, devices, environment_of(events, elapsed_s), m.METHOD)


def _compare(dtype: str, cells: tuple, devices: tuple) -> Comparison:
    mine = [c for c in cells if c.dtype == dtype]
    return compare_cells(
        dtype, "TFLOP/s", mine, devices, ("tflops", "peak_tflops"), lambda c: c.n, lambda p: getattr(p, m.ROOF_FIELD[dtype]), ROOF_WORDS[dtype]
    )


run_matmul = chip_runner("devctl.probe.bench_matmul", "bench matmul", assemble)
