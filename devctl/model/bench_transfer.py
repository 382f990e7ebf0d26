"""`devctl bench transfer`: what was asked, what was measured, and how it compares.

Pure stdlib on purpose: the CLI (which must not import jax or numpy) and the
probe child both build and read these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Hashable, Iterable, Literal, cast, get_args

from devctl.model import json_schema
from devctl.model.bench import BURST_MIN_S, GIB, KIB, MIB, BenchDevice, Request, RunEnvironment
from devctl.model.devices import DeviceRef
from devctl.model.gate import Baseline, Figure, Gate, GateSpec
from devctl.model.timing import Timing
from devctl.units import figure, format_size_short

SCHEMA = "devctl.bench.transfer/2"

# The words a cell is named by. Fields hold them as str (the CLI, the probe child and the renderers pass them
# around as text); the JSON Schema still allows only these (json_schema(enum=...)).
Direction = Literal["h2d", "d2h", "d2d", "d2d-self"]
Layout = Literal["single", "sharded", "replicated"]
Variant = Literal["pageable", "aligned", "pinned", "numpy", "copy", "async", "put", "donate"]
RoofKind = Literal["pcie", "host_memcpy"]
DIRECTIONS: tuple[str, ...] = get_args(Direction)
LAYOUTS: tuple[str, ...] = get_args(Layout)
_VARIANT_NAMES: tuple[str, ...] = get_args(Variant)
_ROOFS: tuple[str | None, ...] = (*get_args(RoofKind), None)
# What names a cell across runs (Cell.key): direction, variant, layout, size_bytes, src, dst.
CellKey = tuple[str, str, str, int, str, str]

# Per direction, the variants JAX offers; the first is what a plain JAX call does.
VARIANTS: dict[str, tuple[str, ...]] = {
    "h2d": ("pageable", "aligned", "pinned"),
    # The first variant is the default: a real, writable host copy (np.asarray may return a view on CPU).
    "d2h": ("copy", "numpy", "pinned", "async"),
    "d2d": ("put", "donate"),
    "d2d-self": ("put", "donate"),
}
ALL_VARIANTS = tuple(dict.fromkeys(v for names in VARIANTS.values() for v in names))
# What the default run adds to each direction's plain call on an accelerator: JAX's plain h2d and d2h go through
# pageable host memory, often a fraction of what the link carries (an H200: 6.9 and 1.4 GB/s pageable, 49.5 and
# 53.0 through pinned_host memory, on a 63 GB/s PCIe Gen5 x16 link). Measuring only them reads as a broken link.
PINNED_DEFAULT_DIRECTIONS = ("h2d", "d2h")
# A path this many times faster than the plain call is worth changing a program for: the verdict says how.
ADVICE_SPEEDUP = 1.5
# A plain call below this share of its PCIe roof, with no pinned path measured beside it, is not the link's speed.
LOW_SHARE_OF_LINK_PCT = 50.0

# Powers of four keep the default sweep to nine sizes: latency at the small end, bandwidth at the large.
DEFAULT_SIZES = tuple(4 * KIB * 4**i for i in range(9))  # 4K .. 256M
LARGE_SIZE = GIB  # added to the default sweep only where the device has room for it
# 64M, not 16M: on a CPU backend 16M transfers land in one of two page-fault modes from run to run (a 2x
# difference no gate can tell from a slower path); 64M ones stay within a few percent (benchmarks/README.md).
QUICK_SIZES = (4 * KIB, 64 * MIB)
# Up to this size a transfer is timed call by call, each with its block_until_ready: the launch and the sync are
# most of it, and the figure (a latency) is what a program that waits for it pays. Above it a cell whose source
# can be sent again is timed in bursts (method burst: K calls, one sync), as bench memory's copies are.
LATENCY_MAX_BYTES = 64 * KIB
# A burst's results in flight at once: at most this much, and at most a quarter of the memory free where they land.
BURST_MEMORY_BYTES = 8 * GIB

# How a cell is timed, in words (--verbose).
METHOD = (
    "each cell's buffers made once per size, untimed warm-ups first; up to "
    f"{format_size_short(LATENCY_MAX_BYTES)} a sample is one transfer and its block_until_ready (a latency: what a "
    "program that waits for it pays); above, where the source can be sent again, a burst of transfers dispatched "
    "back to back and one wait on every result (transfers from one source may overlap; an on-device copy of the one "
    "before's result waits on the last), calibrated to last "
    f"{BURST_MIN_S * 1e3:g} ms, "
    "figures per transfer; a transfer that needs a fresh source (donate, a d2h into a new host array) and every CPU "
    "cell are timed one by one; GB/s (decimal) from the median; every cell's bytes compared once with what was sent"
)

DEFAULT_REPEATS = 3  # nvbandwidth takes the median of 3 samples; small sizes get many more from --min-time
DEFAULT_MIN_TIME_S = 0.03
DEFAULT_WARMUPS = 2
# Ten samples even in a smoke test: the regression gate judges a cell against its p10-p90 spread, which three
# samples cannot show (a --quick baseline of 3 flapped on 16M cells whose 3 samples happened to agree).
QUICK_REPEATS = 10
QUICK_MIN_TIME_S = 0.01
QUICK_WARMUPS = 1


def main_variant(direction: str) -> str:
    return VARIANTS[direction][0]


def pinned_is_a_path(platform: str, memory_kinds: Iterable[str]) -> bool:
    """Whether pinned_host memory is a host<->device path of its own on a device: on an accelerator that offers it
    (a GPU, a TPU), not on a CPU device, whose memory is host memory whatever its kind (recent jaxlibs give CPU
    devices a pinned_host kind too: a copy from it is the same memcpy as from a numpy array)."""
    return platform != "cpu" and "pinned_host" in tuple(memory_kinds)


@dataclass(frozen=True)
class TransferOptions(Request):
    """A validated request; the CLI builds it, the probe child reads it back from JSON."""

    directions: tuple[str, ...] = DIRECTIONS
    # None: each direction's main variant, and pinned for h2d and d2h too with pinned_on_accelerators
    variants: tuple[str, ...] | None = None
    layouts: tuple[str, ...] = ("single",)
    sizes_bytes: tuple[int, ...] | None = None  # None: the default sweep, decided where devices are known
    devices: tuple[DeviceRef, ...] | None = None  # None: the first local device; () : every local device
    src: DeviceRef | None = None
    dst: DeviceRef | None = None
    all_pairs: bool = False  # d2d: every ordered pair at every size
    repeats: int = DEFAULT_REPEATS
    min_time_s: float = DEFAULT_MIN_TIME_S
    warmups: int = DEFAULT_WARMUPS
    verify: bool = True
    quick: bool = False
    # With variants None: h2d and d2h also measure pinned where the devices measured have a pinned path
    # (pinned_is_a_path). The CLI's default; off here, for callers that want the plain call alone (devctl
    # check's h2d figure).
    pinned_on_accelerators: bool = False

    def variants_for(self, direction: str, layout: str, *, pinned_path: bool = False) -> tuple[str, ...]:
        """The variants measured for a direction and layout; `pinned_path`: the devices measured have a pinned
        path of their own (pinned_is_a_path), which the default adds to h2d and d2h."""
        # Mesh layouts measure what a plain call does; variants are single-device questions.
        if layout != "single":
            return (main_variant(direction),)
        if self.variants is None:
            pinned = self.pinned_on_accelerators and pinned_path and direction in PINNED_DEFAULT_DIRECTIONS
            return (main_variant(direction), *(("pinned",) if pinned else ()))
        # A direction that offers none of the named variants still gets its plain call measured.
        return tuple(v for v in VARIANTS[direction] if v in self.variants) or (main_variant(direction),)


@dataclass(frozen=True)
class Cell(Timing):
    """One measured (or skipped) transfer: a direction, variant, layout, size and path."""

    # Two facts the types cannot say: a zero-copy or skipped cell has no bandwidth, and a skipped one no samples.
    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "allOf": [
            {"if": {"properties": {"zero_copy": {"const": True}}}, "then": {"properties": {"gbps": {"const": None}}}},
            {"if": {"properties": {"skipped": {"const": True}}}, "then": {"properties": {"gbps": {"const": None}, "samples": {"const": 0}}}},
        ]
    }

    direction: str = field(metadata=json_schema(enum=DIRECTIONS))
    variant: str = field(metadata=json_schema(enum=_VARIANT_NAMES))
    layout: str = field(metadata=json_schema(enum=LAYOUTS))
    size_bytes: int = field(metadata=json_schema(minimum=1))
    src: str  # "host", a device ("cuda:1"), or every device of a mesh layout ("cuda:all")
    dst: str
    devices_involved: int = field(default=1, metadata=json_schema(minimum=1))
    bytes_moved: int | None = field(default=None, metadata=json_schema(minimum=0))  # bytes that really crossed, e.g. N x size for a replicated put
    gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s from the median; None when zero-copy or skipped
    peak_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # from the fastest sample, for comparison with event-timed tools
    per_device_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))
    zero_copy: bool = False  # JAX aliased the buffer: no bytes moved, so no bandwidth
    verified: bool | None = None  # None: not checked (--no-verify or skipped)
    roof: str | None = field(default=None, metadata=json_schema(enum=_ROOFS))  # the physical limit it is compared with
    roof_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))
    roof_reason: str | None = None  # why there is no roof to compare with
    skipped: bool = False
    note: str | None = None
    # Why this cell's figure cannot be trusted: it is above its roof, which no copy can be (pct_of_roof still
    # says by how much). None: nothing suspect.
    suspect: str | None = None

    @property
    def key(self) -> CellKey:
        return (self.direction, self.variant, self.layout, self.size_bytes, self.src, self.dst)


ROOF_NAMES = {"pcie": "the PCIe link's peak", "host_memcpy": "the host's best memcpy"}


def above_roof(pct_of_roof: float | None) -> bool:
    """A figure above its physical limit was not measured as it claims (see roof_verdict)."""
    return pct_of_roof is not None and pct_of_roof > 100


def roof_verdict(gbps: float | None, roof: str | None, roof_gbps: float | None) -> tuple[float | None, str | None]:
    """A cell's GB/s as a percentage of its roof, and why it is suspect when above it: no copy beats the path's
    limit, so it was timed wrong (a copy overlapped or cached) or its roof measured while the machine was busier."""
    if gbps is None or not roof_gbps:
        return None, None
    pct = 100 * gbps / roof_gbps
    if not above_roof(pct):
        return pct, None
    name = ROOF_NAMES.get(roof or "", "its roof")
    return pct, (
        f"{figure(gbps)} GB/s is {pct:.0f}% of {name} ({figure(roof_gbps)} GB/s), which no copy can beat: "
        "the machine was busier while the roof was measured, or the timing is off"
    )


@dataclass(frozen=True)
class MemcpyRoof:
    """The host's own copy speed at one size: numpy.copyto into a warm, preallocated buffer placed as the source
    is, on one thread, as XLA's CPU client copies (one std::memcpy per buffer, on the caller's thread or one
    worker's). The roof is the best copy of many, not a typical one: a cell's median can reach it, never pass it."""

    size_bytes: int = field(metadata=json_schema(minimum=1))
    samples: int = field(metadata=json_schema(minimum=0))
    median_s: float | None = field(metadata=json_schema(minimum=0))  # the typical copy, for comparison
    gbps: float | None = field(metadata=json_schema(minimum=0))  # decimal GB/s of the fastest copy (min_s): the roof
    note: str | None = None  # why nothing was measured at this size
    min_s: float | None = field(default=None, metadata=json_schema(minimum=0))  # the fastest copy


@dataclass(frozen=True)
class PcieLink:
    """An NVIDIA GPU's PCIe link from NVML: the peak from the maximum generation and width, and what was seen."""

    device: str  # "cuda:0"
    pci_bus_id: str | None = None
    max_gen: int | None = field(default=None, metadata=json_schema(minimum=1))  # of the device and its slot together
    max_width: int | None = field(default=None, metadata=json_schema(minimum=1))
    gpu_max_gen: int | None = field(default=None, metadata=json_schema(minimum=1))  # what the GPU alone supports
    peak_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s of max_gen x max_width, after encoding
    seen_gen: int | None = field(default=None, metadata=json_schema(minimum=0))  # highest generation read right after this device's transfers
    seen_width: int | None = field(default=None, metadata=json_schema(minimum=0))
    below_max: bool | None = None  # the link trained below its maximum while transfers ran
    reason: str | None = None  # why the link could not be read


@dataclass(frozen=True)
class Roofs:
    """The physical limits the measurements are compared with."""

    host_memcpy: tuple[MemcpyRoof, ...] = ()  # one per size measured
    pcie: tuple[PcieLink, ...] = ()  # one per NVIDIA GPU measured
    pcie_reason: str | None = None  # why there is no PCIe roof (no GPU, no NVML)


class BenchEnvironment(RunEnvironment):
    """What a bench transfer run was: versions, machine, settings."""

    sizes_bytes: list[Annotated[int, json_schema(minimum=1)]]  # the sizes measured
    pairs_note: str | None  # device pairs left out, and why
    min_time_s: Annotated[float, json_schema(minimum=0)]
    verify: bool
    dtype: str  # of the arrays moved


@dataclass(frozen=True)
class VariantFigure:
    """A measured variant beside the fastest one of its direction: its rate and how far it is from the roof."""

    variant: str = field(metadata=json_schema(enum=_VARIANT_NAMES))
    gbps: float = field(metadata=json_schema(exclusiveMinimum=0))
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))  # of the same roof as the fastest's


@dataclass(frozen=True)
class Fastest:
    """The quickest measured variant of one direction and layout at its largest measured size, the others measured
    there, and what to change when one is much faster than the plain call."""

    direction: str = field(metadata=json_schema(enum=DIRECTIONS))
    layout: str = field(metadata=json_schema(enum=LAYOUTS))
    size_bytes: int = field(metadata=json_schema(minimum=1))
    variant: str | None = field(metadata=json_schema(enum=(*_VARIANT_NAMES, None)))  # None: no variant measured a bandwidth at this size
    gbps: float | None = field(metadata=json_schema(minimum=0))
    roof: str | None = field(default=None, metadata=json_schema(enum=_ROOFS))
    roof_gbps: float | None = field(default=None, metadata=json_schema(minimum=0))
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))
    zero_copy_variants: tuple[str, ...] = field(default=(), metadata=json_schema(items={"enum": _VARIANT_NAMES}))  # variants where JAX aliased instead of copying
    note: str | None = None
    others: tuple[VariantFigure, ...] = ()  # every other variant measured at this size, fastest first
    # What to change: a path much faster than the plain call and how to take it, or why the plain call alone
    # says little about the link. None: nothing to change.
    advice: str | None = None


@dataclass(frozen=True)
class TransferReport:
    """`devctl bench transfer`: every cell measured, the roofs, the fastest path per direction."""

    results: tuple[Cell, ...]
    roofs: Roofs
    fastest: tuple[Fastest, ...]
    devices: tuple[BenchDevice, ...]
    environment: BenchEnvironment
    gate: Gate | None = None  # None without --baseline
    schema: str = field(default=SCHEMA, metadata=json_schema(const=SCHEMA))


def fastest_paths(cells: tuple[Cell, ...] | list[Cell]) -> tuple[Fastest, ...]:
    """Per direction and layout, the fastest variant at the largest size where the most variants were measured (a
    pinned cell skipped at 1G for want of host memory, but measured at 256M, still compares), and the others there."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        if not c.skipped:
            groups.setdefault((c.direction, c.layout), []).append(c)
    out = []
    for (direction, layout), group in groups.items():
        variants_at: dict[int, set[str]] = {}
        for c in group:
            variants_at.setdefault(c.size_bytes, set()).update([c.variant] if c.gbps is not None else [])
        most = max(len(v) for v in variants_at.values())
        top = max(size for size, v in variants_at.items() if len(v) == most)
        at_top = [c for c in group if c.size_bytes == top]
        zero = tuple(dict.fromkeys(c.variant for c in at_top if c.zero_copy))
        # A cell whose bytes did not arrive intact is not a path anyone should take.
        measured = [c for c in at_top if c.gbps is not None and c.verified is not False]
        if not measured:
            note = "every variant was zero-copy here: no bytes move" if zero else "nothing measured at this size"
            out.append(Fastest(direction, layout, top, None, None, zero_copy_variants=zero, note=note))
            continue
        # Each variant by its best cell (several devices: the fastest of them), fastest first.
        by_variant: dict[str, Cell] = {}
        for c in sorted(measured, key=lambda c: c.gbps or 0.0, reverse=True):  # every measured cell has one
            by_variant.setdefault(c.variant, c)
        best, *rest = by_variant.values()
        # Skipped cells too: a pinned path skipped for want of pinned_host memory has its reason in the table.
        tried = {c.variant for c in cells if (c.direction, c.layout, c.size_bytes) == (direction, layout, top)}
        out.append(
            Fastest(
                direction, layout, top, best.variant, best.gbps, best.roof, best.roof_gbps, best.pct_of_roof, zero,
                others=tuple(VariantFigure(c.variant, c.gbps or 0.0, c.pct_of_roof) for c in rest),
                advice=_advice(direction, layout, best, by_variant, tried),
            )
        )
    return tuple(out)


def _advice(direction: str, layout: str, best: Cell, by_variant: dict[str, Cell], tried: set[str]) -> str | None:
    """What the fastest path says to change in a program (CPU devices, a host_memcpy roof, have no pinned path)."""
    if layout != "single" or direction not in PINNED_DEFAULT_DIRECTIONS or best.gbps is None:
        return None
    main = main_variant(direction)
    plain = by_variant.get(main)
    if best.variant == "pinned" and best.roof != "host_memcpy" and plain is not None and plain.gbps:
        speedup = best.gbps / plain.gbps
        if speedup < ADVICE_SPEEDUP:
            return None
        how = 'jax.device_put(x, sharding.with_memory_kind("pinned_host"))'
        if direction == "h2d":
            # The recipe times the copy from pinned_host memory, as a program whose arrays live there pays it; one
            # that stages each batch also pays a host copy into it first. Say so rather than promise the ratio.
            return (
                f"h2d from pinned_host memory is {speedup:.1f}x {main}: stage host arrays through it with {how}, "
                "then device_put to the device (this figure leaves out that first copy)"
            )
        return f"d2h into pinned_host memory is {speedup:.1f}x {main}: fetch through it with {how}, then np.asarray"
    low = best.pct_of_roof is not None and best.pct_of_roof < LOW_SHARE_OF_LINK_PCT
    if "pinned" not in tried and best.roof == "pcie" and low:
        return (
            f"{best.variant} {direction} reaches {best.pct_of_roof:.0f}% of the PCIe link: pageable host memory, "
            "not the link, is often the limit; --variants main,pinned measures transfers through pinned_host memory"
        )
    return None


# A cell is bandwidth-bound when its path's fixed per-transfer cost is at most this share of its time: then at
# least nine tenths of what it measures is bytes moving, and a slower path shows in it nearly undiluted. A
# latency-bound cell (a 4K transfer is almost all fixed cost: a dispatch, a sync, an allocation) moves with
# the scheduler and the allocator from run to run, not with the path's bandwidth.
FIXED_COST_SHARE = 0.10


def fixed_costs_s(figures: Iterable[Figure]) -> dict[tuple[Hashable, ...], float | None]:
    """Per path (a cell's key without its size), the fixed per-transfer cost in seconds: where the line through its
    smallest and largest sizes' medians meets zero bytes (docs/bench.md); None for a path measured at one size."""
    paths: dict[tuple[Hashable, ...], list[Figure]] = {}
    for f in figures:
        if f.median_s is not None:
            paths.setdefault(_path(f), []).append(f)
    out: dict[tuple[Hashable, ...], float | None] = {}
    for path, group in paths.items():
        small = min(group, key=_size)
        large = max(group, key=_size)
        if _size(small) == _size(large):
            out[path] = None
            continue
        t0, t1 = cast(float, small.median_s), cast(float, large.median_s)
        slope = (t1 - t0) / (_size(large) - _size(small))
        out[path] = min(max(t0 - _size(small) * slope, 0.0), t0)
    return out


def _size(f: Figure) -> int:
    return cast(CellKey, f.key)[3]


def _path(f: Figure) -> tuple[Hashable, ...]:
    key = cast(CellKey, f.key)
    return (*key[:3], *key[4:])


def gate_figure(c: Cell) -> Figure:
    label = f"{c.direction} {c.variant} {c.layout} {format_size_short(c.size_bytes)} {c.src}->{c.dst}"
    return Figure.of(c.key, label, c.gbps, c)


def gate_rule(baseline: Baseline) -> Callable[[Figure], str | None]:
    """Only bandwidth-bound cells are judged: whether a cell is, is decided from the baseline alone, so every rerun
    judges the same cells. A path measured at one size cannot tell its fixed cost from its bytes."""
    fixed = fixed_costs_s(baseline.figures.values())

    def why_not(f: Figure) -> str | None:
        cost = fixed.get(_path(f))
        if cost is None:
            return "one-size"
        return "latency-bound" if cost > FIXED_COST_SHARE * cast(float, f.median_s) else None

    return why_not


def _gate_cell_problem(cell: dict) -> str | None:
    if cell["direction"] not in DIRECTIONS or cell["layout"] not in LAYOUTS:
        return f"has direction {cell['direction']!r} and layout {cell['layout']!r}, not a devctl cell"
    return None


GATE = GateSpec(
    "bench transfer", SCHEMA, Cell,
    {"direction": str, "variant": str, "layout": str, "size_bytes": int, "src": str, "dst": str},
    "gbps", "GB/s", gate_figure, gate_rule,
    judged_words="bandwidth-bound cells",
    missing_words="no bandwidth now (zero-copy or skipped)",
    left_out_words={
        "latency-bound": "{n} latency-bound cells not gated; --gate-all-sizes gates them",
        "one-size": "{n} cells not gated: their path was measured at one size, which cannot tell latency from "
        "bandwidth; --gate-all-sizes gates them",
    },
    check_cell=_gate_cell_problem,
    nothing_judged=f"is bandwidth-bound (each path needs a size whose fixed per-transfer cost is at most "
    f"{FIXED_COST_SHARE:.0%} of its time, and a smaller size to show that cost); measure larger sizes",
    all_sizes_flag="--gate-all-sizes",
)  # fmt: skip

# Host buffers every size has: the pattern the transfers send and the memcpy roof's destination.
HOST_BUFFERS = 2


def host_bytes_needed(
    opts: TransferOptions, size: int, *, devices_in_host_memory: bool, device_count: int, pinned_path: bool = False
) -> int:
    """Peak host memory the probe holds for one size: its buffers plus the most any one cell holds at once. Measured
    on CPU JAX (peak RSS per byte of --sizes at 32M and 256M, 4 devices): h2d 4x the size, d2h, d2d and d2d-self 5x,
    6x with --variants all, 3-5x with --no-verify, 7-11x replicated. On an accelerator only the host side counts.
    `pinned_path`: the devices have a pinned path of their own (pinned_is_a_path), which the default measures."""

    def variants(direction: str, layout: str) -> tuple[str, ...]:
        return opts.variants_for(direction, layout, pinned_path=pinned_path)

    single_variants = {v for d in opts.directions for v in variants(d, "single")}
    aligned = 1 if "single" in opts.layouts and "h2d" in opts.directions and "aligned" in single_variants else 0
    per_cell = max(
        _cell_host_copies(d, variants(d, layout), layout, opts.verify, devices_in_host_memory, device_count)
        for d in opts.directions
        for layout in opts.layouts
    )
    return (HOST_BUFFERS + aligned + per_cell) * size


def _cell_host_copies(direction: str, variants: tuple[str, ...], layout: str, verify: bool, in_host: bool, n: int) -> int:
    """Copies of the size in host memory while one cell runs (its verification included)."""
    check = 1 if verify else 0  # the verification's comparison allocates one boolean per byte
    pinned = 1 if "pinned" in variants else 0
    if not in_host:
        if direction == "d2h":
            return 1 + pinned + check
        return (pinned if direction == "h2d" else 0) + 2 * check  # the result fetched to the host, then compared
    copies = n if layout == "replicated" else 1  # a sharded array holds the size once in all
    if direction == "h2d":
        return copies + pinned + check
    if direction == "d2h":
        # The device array, the fresh copy each repetition reads, and the host result (a view when replicated).
        return 2 * copies + (0 if layout == "replicated" else 1)
    if direction == "d2d":
        # One source on the first device; a replicated result is checked a shard at a time, in place.
        return 1 + copies + (0 if layout == "replicated" else check)
    return 2 * copies + check  # d2d-self: the source and its copy
