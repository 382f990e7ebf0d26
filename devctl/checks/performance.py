"""Checks that benchmark the devices, each only when an expectation asks for it: memory-bw, matmul, busbw and
stragglers. They run the children of `devctl bench memory`, `bench matmul` and `bench collective` at one size
that fills the device (collect.check_context.Context.bench), so a figure here is the figure those commands give.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devctl.checks.verdict import Verdict, because, failed, join, passed, skipped
from devctl.model import bench_collective as coll
from devctl.model.bench import Comparison
from devctl.model.bench_matmul import MatmulOptions
from devctl.model.bench_memory import GIB, MIB, MemoryOptions
from devctl.units import digits, figure, format_size_short

if TYPE_CHECKING:
    from devctl.collect.check_context import Context

# One size per benchmark, large enough that the figure is the device's and not its fixed costs': a copy far
# beyond any cache (an H100's L2 is 50 MB), a matmul that fills tensor cores or MXUs, an all-reduce on the
# plateau of nccl-tests' busbw curve. A CPU gets sizes a 2-core machine measures in seconds.
MEMORY_BYTES = {"cpu": 256 * MIB, "accelerator": GIB}
MATMUL_SIDE = {"cpu": 512, "accelerator": 8192}
ALLREDUCE_BYTES = {"cpu": 16 * MIB, "accelerator": 256 * MIB}
# The dtype a device's matmul throughput is rated in: bf16 on GPUs and TPUs; f32 on a CPU, where bf16 is emulated.
MATMUL_DTYPE = {"cpu": "f32", "accelerator": "bf16"}


def _scale(platform: str) -> str:
    return "cpu" if platform == "cpu" else "accelerator"


def bench_options(kind: str, platform: str, device_count: int) -> tuple[Any, str | None]:
    """The options of one short benchmark on `platform`'s devices, or None and why it has nothing to measure."""
    scale = _scale(platform)
    if kind == "memory":
        return MemoryOptions(quick=True, sizes_bytes=(MEMORY_BYTES[scale],)), None
    if kind == "matmul":
        return MatmulOptions(quick=True, dtypes=(MATMUL_DTYPE[scale],), sizes=(MATMUL_SIDE[scale],)), None
    if device_count < 2:
        return None, f"one {platform} device: no collective to measure (an all-reduce needs at least 2 devices)"
    return coll.CollectiveOptions(collectives=("all-reduce",), sizes_bytes=(ALLREDUCE_BYTES[scale],), quick=True), None


def check_memory_bw(ctx: Context) -> Verdict:
    want = ctx.expectations.min_memory_bw_gbps
    if want is None:
        return skipped("no --min-memory-bw expectation (devctl bench memory measures each device's memory bandwidth)")
    report, why = ctx.bench("memory")
    if report is None:
        return _unmeasured(ctx, failed(f"could not measure memory bandwidth: {why}", "run devctl bench memory for details"))
    size = format_size_short(report.results[0].size_bytes) if report.results else "?"
    return _judge(
        report.comparison, want, "--min-memory-bw", "memory", f"memory copy at {size}", _wrong(report),
        "a device below the rest or far below its HBM peak: check its clocks and throttle reasons "
        "(nvidia-smi -q -d PERFORMANCE,CLOCK; on TPU, the VM's health), then run devctl bench memory",
    )  # fmt: skip


def check_matmul(ctx: Context) -> Verdict:
    want = ctx.expectations.min_tflops
    if want is None:
        return skipped("no --min-tflops expectation (devctl bench matmul measures each device's matmul throughput)")
    report, why = ctx.bench("matmul")
    if report is None:
        return _unmeasured(ctx, failed(f"could not measure matmul throughput: {why}", "run devctl bench matmul for details"))
    comparison = report.comparisons[0]
    side = report.results[0].n if report.results else "?"
    return _judge(
        comparison, want, "--min-tflops", "matmul", f"{comparison.metric} matmul {side}x{side}", _wrong(report),
        "check clocks, power and thermal throttling (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE), then run devctl bench matmul",
    )  # fmt: skip


def _unmeasured(ctx: Context, verdict: Verdict) -> Verdict:
    """A benchmark that could not run: because of the backends check when no backend gave it a device to measure."""
    return because("backends", verdict) if ctx.bench_platform()[0] is None else verdict


def _wrong(report: Any) -> list[str]:
    """The devices whose result was wrong (the bench reports no figure for them)."""
    return list(dict.fromkeys(c.device for c in report.results if c.verified is False))


def _judge(comp: Comparison, want: float, flag: str, bench: str, what: str, wrong: list[str], remedy: str) -> Verdict:
    """Every device's figure against the expected minimum: the slow ones named with their figure and its share of
    the published peak; a device whose result was wrong fails, named as such."""
    unit = comp.unit
    figures = {f.device: f.value for f in comp.figures}
    details = {"figures": figures, "unit": unit, "expected_min": want, "roof": comp.roof_name, "median": comp.median}
    if wrong:
        return failed(
            f"{what}: the result was wrong on {join(wrong, 4, ', ')} (no figure reported)",
            f"run devctl bench {bench} for details; a device that computes wrong results needs its health checked",
            **details,
        )
    unmeasured = [f.device for f in comp.figures if f.value is None]
    if unmeasured:
        return failed(f"{what}: nothing measured on {join(unmeasured, 4, ', ')}", f"run devctl bench {bench} for details", **details)
    slow = sorted((f for f in comp.figures if (f.value or 0) < want), key=lambda f: f.value or 0)
    if slow:
        parts = [f"{f.device} {figure(f.value)} {unit}{_of_roof(f.pct_of_roof)}" for f in slow]
        return failed(f"{what}: {join(parts, 3)}, expected at least {want:g} {unit} ({flag})", remedy, **details)
    values = [f.value for f in comp.figures if f.value is not None]
    low, high = min(values), max(values)
    spread = figure(low) if figure(low) == figure(high) else f"{figure(low)} to {figure(high)}"
    best = max(comp.figures, key=lambda f: f.value or 0)
    return passed(f"{what}: {spread} {unit} on {len(values)} device(s){_of_roof(best.pct_of_roof)}, expected at least {want:g} {unit}", **details)


def _of_roof(pct: float | None) -> str:
    return "" if pct is None else f" ({pct:.0f}% of peak)"


def check_busbw(ctx: Context) -> Verdict:
    want = ctx.expectations.min_busbw_gbps
    if want is None:
        return skipped("no --min-busbw expectation (devctl bench collective measures the collectives' bus bandwidth)")
    report, why = ctx.bench("collective")
    if report is None:
        return _unmeasured(ctx, failed(f"could not measure all-reduce bus bandwidth: {why}", "run devctl bench collective for details"))
    cells = [c for c in report.results if c.collective == "all-reduce"]
    measured = [c for c in cells if c.busbw_gbps is not None]
    if not measured:
        note = next((c.note for c in cells if c.note), "no all-reduce was measured")
        return failed(f"could not measure all-reduce bus bandwidth: {note}", "run devctl bench collective for details")
    cell = measured[0]
    what = f"all-reduce over {cell.ranks} {report.devices[0].platform if report.devices else ''} devices at {format_size_short(cell.size_bytes)} per device"
    busbw = cell.busbw_gbps or 0.0
    roof = f" ({busbw / cell.roof_gbps * 100:.0f}% of the link peak)" if cell.roof_gbps else ""
    details = {"busbw_gbps": busbw, "algbw_gbps": cell.algbw_gbps, "ranks": cell.ranks, "size_bytes": cell.size_bytes, "expected_min": want}
    if busbw < want:
        return failed(
            f"{what}: busbw {figure(busbw)} GB/s{roof}, expected at least {want:g} GB/s (--min-busbw)",
            "check the links (nvidia-smi topo -m, nvidia-smi nvlink -s; on TPU the ICI topology) and NCCL_* settings, "
            "then run devctl bench collective --all-pairs to find the slow link",
            **details,
        )
    return passed(f"{what}: busbw {figure(busbw)} GB/s{roof}, expected at least {want:g} GB/s", **details)


def check_stragglers(ctx: Context) -> Verdict:
    if not ctx.expectations.stragglers:
        return skipped("not asked (--stragglers compares every device's memory bandwidth and matmul throughput with its peers')")
    comparisons: list[Comparison] = []
    details: dict[str, Any] = {}
    for kind in ("memory", "matmul"):
        report, why = ctx.bench(kind)
        if report is None:
            return _unmeasured(ctx, failed(f"could not measure the {kind} figures to compare: {why}", f"run devctl bench {kind} for details"))
        comp = report.comparison if kind == "memory" else report.comparisons[0]
        comparisons.append(comp)
        # Every device's figure, for a person and for the cluster's verdict (checks.cluster compares the hosts).
        details[kind] = {"metric": comp.metric, "unit": comp.unit, "figures": {f.device: f.value for f in comp.figures}, "median": comp.median}
    named = [f"{c.metric} {s.describe(c.unit, digits=digits(c.median))}" for c in comparisons for s in c.stragglers]
    devices = len(comparisons[0].figures)
    if named:
        return failed(
            f"straggler(s): {join(named, 3)}",
            "drain the named device, check its clocks, temperature and throttle reasons (nvidia-smi -q -d PERFORMANCE), "
            "then run devctl bench memory and devctl bench matmul",
            **details,
        )
    if devices < 2:
        return skipped("one device here: no peer to compare it with (with --distributed the hosts are compared)", **details)
    medians = ", ".join(f"{c.metric} median {figure(c.median)} {c.unit}" for c in comparisons)
    return passed(f"no straggler among {devices} devices ({medians})", rule=comparisons[0].rule, **details)
