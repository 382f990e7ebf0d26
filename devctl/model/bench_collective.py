"""`devctl bench collective`: what was asked, what each collective measured, and its bus bandwidth.

Sizes and bandwidths follow nccl-tests (doc/PERFORMANCE.md, https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
a cell's size S is nccl-tests' "size", per rank, and `algbw = S / t` from the median time t. S is the buffer
each rank holds for all-reduce, all-to-all and ppermute (send/recv), the *whole* array for all-gather (its
output: sendcount x n) and reduce-scatter (its input: recvcount x n). The bus bandwidth corrects algbw for the
n ranks of the axis, so that it is comparable with one link's hardware peak whatever n is:

    all-reduce      busbw = algbw x 2(n-1)/n
    all-gather      busbw = algbw x (n-1)/n
    reduce-scatter  busbw = algbw x (n-1)/n
    all-to-all      busbw = algbw x (n-1)/n
    ppermute        busbw = algbw            (point to point, as nccl-tests' sendrecv)

Pure stdlib: the CLI (no jax) and the probe child both build and read these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, ClassVar, Literal, get_args

from devctl.model import json_schema
from devctl.model.bench import BURST_MIN_S, KIB, MIB, BenchDevice, Request, RunEnvironment
from devctl.model.gate import Baseline, Figure, Gate, GateSpec
from devctl.model.timing import Timing
from devctl.units import format_size_short

SCHEMA = "devctl.bench.collective/2"

Collective = Literal["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ppermute"]
COLLECTIVES: tuple[str, ...] = get_args(Collective)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int32": 4, "int8": 1}  # bytes per element
DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
Scope = Literal["intra-host", "inter-host"]
SCOPES: tuple[str, ...] = get_args(Scope)

# Powers of four: latency at the small end, bandwidth at the large (nccl-tests sweeps -b 8 -e 8G in the same spirit).
DEFAULT_SIZES = tuple(KIB * 4**i for i in range(10))  # 1K .. 256M per device
QUICK_SIZES = (4 * KIB, MIB)
# Below this size a cell's time is mostly fixed cost: it is reported as a latency.
LATENCY_MAX_BYTES = 64 * KIB

DEFAULT_REPEATS = 5
DEFAULT_WARMUPS = 2
# Timed seconds per cell: small sizes take many samples within it, large ones at least --repeats.
DEFAULT_BUDGET_S = 0.2
QUICK_REPEATS = 3
QUICK_WARMUPS = 1
QUICK_BUDGET_S = 0.05
# The default sweep stops growing a collective once one cell would take longer than this (a 2-core CPU
# moving 1 GiB through four forced devices takes seconds a call); --sizes measures what it names.
SWEEP_CELL_CAP_S = 1.5
QUICK_CELL_CAP_S = 0.5


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' correction from algbw to busbw for `n` ranks (doc/PERFORMANCE.md, "Summary")."""
    if n < 2:
        raise ValueError(f"a collective needs at least 2 ranks, got {n}")
    if collective == "all-reduce":
        return 2 * (n - 1) / n
    if collective in ("all-gather", "reduce-scatter", "all-to-all"):
        return (n - 1) / n
    if collective in ("ppermute", "ppermute-pair"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")


def input_bytes(collective: str, size: int, n: int) -> int:
    """What each rank sends in: nccl-tests' S, except all-gather, whose S is its output (S/n in)."""
    return size // n if collective == "all-gather" else size


def output_bytes(collective: str, size: int, n: int) -> int:
    """What each rank gets back: reduce-scatter returns S/n, every other collective S."""
    return size // n if collective == "reduce-scatter" else size


def bandwidths(collective: str, size: int, n: int, median_s: float | None) -> tuple[float | None, float | None]:
    """(algbw, busbw) in decimal GB/s from the median time; None where nothing was timed."""
    if not median_s or median_s <= 0:
        return None, None
    alg = size / median_s / 1e9
    return alg, alg * bus_factor(collective, n)

# Calls of a burst on CPU devices. XLA's CPU client can hang with many collectives in flight: 33 and 64 chained
# 1 MiB all-reduces over 4 forced devices waited in its rendezvous forever (jaxlib 0.10.2, 2 cores), 32 did not.
CPU_MAX_BURST = 8

# How a cell is timed, in words (--verbose), and what its bus bandwidth is.
METHOD = (
    "each collective jitted over one mesh axis with shard_map and compiled once, its input made on the devices; "
    f"untimed warm-ups; up to {format_size_short(LATENCY_MAX_BYTES)} a sample is one call and its "
    "block_until_ready (a latency); above, a burst of calls dispatched back to back and one sync, calibrated to "
    f"last {BURST_MIN_S * 1e3:g} ms (at most {CPU_MAX_BURST} calls on CPU devices), all-reduce, all-to-all and ppermute each fed the call before's "
    "output; samples until --repeats and --budget are met; the output of one more call checked against what the "
    "collective gives; algbw = size / median"
)
BUSBW_RULE = "busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather, reduce-scatter and all-to-all, x 1 for ppermute (nccl-tests)"

@dataclass(frozen=True)
class CollectiveOptions(Request):
    """A validated request; the CLI builds it, the probe child reads it back from JSON."""

    collectives: tuple[str, ...] = COLLECTIVES
    sizes_bytes: tuple[int, ...] | None = None  # None: the default sweep, capped by SWEEP_CELL_CAP_S
    dtypes: tuple[str, ...] = ("float32",)
    mesh: tuple[tuple[str, int], ...] | None = None  # (axis name, size) in order; None: one axis over every device
    all_pairs: bool = False  # ppermute between every ordered pair of one axis: a link matrix
    repeats: int = DEFAULT_REPEATS
    warmups: int = DEFAULT_WARMUPS
    budget_s: float = DEFAULT_BUDGET_S
    quick: bool = False
    # Set by the CLI with --distributed: {"coordinator", "num_processes", "process_id", "timeout_s"}.
    cluster: dict[str, Any] | None = None

    @property
    def cell_cap_s(self) -> float:
        return QUICK_CELL_CAP_S if self.quick else SWEEP_CELL_CAP_S


@dataclass(frozen=True)
class MeshAxis:
    """One axis of the mesh, measured on its own as a JAX program that shards over it would use it."""

    name: str
    size: int = field(metadata=json_schema(minimum=1))  # ranks in each group: the n of the busbw rule
    groups: int = field(metadata=json_schema(minimum=1))  # independent groups running the collective at once (the other axes)
    scope: str = field(metadata=json_schema(enum=SCOPES))  # inter-host: a group spans several JAX processes (network, DCN)
    first_group: tuple[str, ...]  # the devices of the first group, in axis order


@dataclass(frozen=True)
class CollectiveCell(Timing):
    """One collective on one axis at one size and dtype (or one ppermute pair), measured or skipped."""

    # A skipped cell has no samples and no bandwidth.
    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "if": {"properties": {"skipped": {"const": True}}},
        "then": {"properties": {"samples": {"const": 0}, "busbw_gbps": {"const": None}}},
    }

    collective: str = field(metadata=json_schema(enum=(*COLLECTIVES, "ppermute-pair")))  # ppermute-pair: one ordered pair of --all-pairs
    axis: str
    ranks: int = field(metadata=json_schema(minimum=2))  # n of the busbw rule: the axis size (2 for a pair)
    size_bytes: int = field(metadata=json_schema(minimum=1))  # nccl-tests' S per rank (see the module's docstring)
    dtype: str = field(metadata=json_schema(enum=DTYPES))
    src: str | None = None  # ppermute-pair: the sending device (its index on the axis where the mesh has several groups)
    dst: str | None = None
    algbw_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # S / median, decimal GB/s
    busbw_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # algbw x nccl-tests' factor
    compile_s: float | None = field(default=None, metadata=json_schema(minimum=0))  # lowering and compiling, once, untimed
    roof_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # the per-link peak busbw is set against
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))
    verified: bool | None = None  # the output of a call checked against what the collective gives on its inputs; None: not checked (skipped)
    skipped: bool = False
    note: str | None = None

    @property
    def latency(self) -> bool:
        return self.size_bytes <= LATENCY_MAX_BYTES


@dataclass(frozen=True)
class StragglerFinding:
    """A link (ppermute pair) or a host (JAX process) worse than its peers' median by more than the robust rule allows."""

    kind: str = field(metadata=json_schema(enum=("link", "host")))
    name: str  # "cpu:0->cpu:1", or "process 1 (host-b)"
    collective: str
    axis: str
    size_bytes: int = field(metadata=json_schema(minimum=1))
    gbps: float = field(metadata=json_schema(minimum=0))  # its algbw (link) or busbw (host)
    median_gbps: float = field(metadata=json_schema(minimum=0))  # the median of its peers
    deviation_pct: float  # how far below the median, in percent
    threshold_pct: float  # the bar it crossed (devctl.model.stragglers)


@dataclass(frozen=True)
class HostFigure:
    """One JAX process's own timing of one cell (--distributed): each process times its calls itself."""

    process_index: int = field(metadata=json_schema(minimum=0))
    hostname: str
    collective: str
    axis: str
    size_bytes: int = field(metadata=json_schema(minimum=1))
    dtype: str
    median_s: float | None = field(metadata=json_schema(minimum=0))
    busbw_gbps: float | None = field(metadata=json_schema(minimum=0))


class CollectiveEnvironment(RunEnvironment):
    """What a bench collective run was: versions, machine, settings."""

    shard_map: str  # where shard_map was imported from (jax.shard_map, or jax.experimental.shard_map on older jax)
    device_kind: str | None
    process_count: Annotated[int, json_schema(minimum=1)]  # JAX processes in the mesh (1 without --distributed)
    process_index: Annotated[int, json_schema(minimum=0)]  # this process's index (0 without --distributed): whose timings the cells are
    budget_s: Annotated[float, json_schema(minimum=0)]
    roof_note: str | None  # why busbw has no roof to compare with
    axes_note: str | None  # --mesh axes of one device, which have nothing to exchange and are not measured


@dataclass(frozen=True)
class CollectiveReport:
    """`devctl bench collective`: every cell, the mesh it ran on, and the stragglers found."""

    results: tuple[CollectiveCell, ...]
    axes: tuple[MeshAxis, ...]
    devices: tuple[BenchDevice, ...]  # every device of the mesh (of every process with --distributed)
    environment: CollectiveEnvironment
    stragglers: tuple[StragglerFinding, ...] = ()
    hosts: tuple[HostFigure, ...] = ()  # --distributed: each process's own figures at the largest size of each collective and axis
    gate: Gate | None = None  # --baseline: this run judged against earlier ones (busbw of the bandwidth cells)
    schema: str = SCHEMA


# The regression gate (--baseline): a cell is one collective on one axis at one size and dtype (a pair: its
# ends too), judged on its busbw; latency cells (LATENCY_MAX_BYTES and below) move with the scheduler, not the
# links, and are not judged.
def gate_figure(c: CollectiveCell) -> Figure:
    pair = f" {c.src}->{c.dst}" if c.src is not None else ""
    label = f"{c.collective} {c.axis}{pair} {format_size_short(c.size_bytes)} {c.dtype}"
    key = (c.collective, c.axis, c.ranks, c.size_bytes, c.dtype, c.src, c.dst)
    return Figure.of(key, label, c.busbw_gbps, c)


def gate_rule(_: Baseline) -> Callable[[Figure], str | None]:
    """Only bandwidth cells are judged, above LATENCY_MAX_BYTES (the key's size)."""
    return lambda f: None if f.key[3] > LATENCY_MAX_BYTES else "latency"  # type: ignore[index]  # gate_figure's key


GATE = GateSpec(
    "bench collective", SCHEMA, CollectiveCell,
    {"collective": str, "axis": str, "ranks": int, "size_bytes": int, "dtype": str, "src": (str, type(None)), "dst": (str, type(None))},
    "busbw_gbps", "GB/s", gate_figure, gate_rule,
    left_out_words={"latency": f"{{n}} latency cells ({format_size_short(LATENCY_MAX_BYTES)} and below) not gated"},
)  # fmt: skip
