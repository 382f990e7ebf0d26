"""`devctl bench matmul`: each device's matmul throughput in bf16 and f32, against its published dense peak.

Pure stdlib: the CLI (which must not import jax or numpy) and the probe child both build and read these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from devctl.model import json_schema
from devctl.model.bench import BURST_MIN_S, BenchDevice, ChipEnvironment, ChipOptions, Comparison
from devctl.model.gate import Figure, Gate, GateSpec
from devctl.model.timing import Timing

SCHEMA = "devctl.bench.matmul/2"

Dtype = Literal["bf16", "f32"]
DTYPES: tuple[str, ...] = get_args(Dtype)
# f32 is FP32 math (Precision.HIGHEST): JAX's DEFAULT may run an f32 matmul as TF32 on NVIDIA GPUs and as one bf16
# pass on TPUs, which would be a bf16/TF32 figure under an f32 name.
PRECISION = {"bf16": "DEFAULT", "f32": "HIGHEST"}
ELEMENT_BYTES = {"bf16": 2, "f32": 4}
# Which published figure each dtype is set against (devctl.model.peaks): f32 runs at Precision.HIGHEST, FP32 math.
ROOF_FIELD = {"bf16": "bf16_tflops", "f32": "f32_tflops"}

# Square matrices of side N: 2*N^3 flops per call. An accelerator needs thousands a side to fill its tensor cores
# or MXUs; a CPU is saturated far sooner, and a 2-core machine must finish --quick in seconds.
DEFAULT_SIZES_ACCELERATOR = (2048, 4096, 8192)
DEFAULT_SIZES_CPU = (512, 1024)
QUICK_SIZES_ACCELERATOR = (4096,)
QUICK_SIZES_CPU = (512,)
MIN_SIDE, MAX_SIDE = 16, 65536
# A device holds A, B and the result, and the verification's reference row.
DEVICE_COPIES = 3


def default_sizes(platform: str, quick: bool) -> tuple[int, ...]:
    if platform == "cpu":
        return QUICK_SIZES_CPU if quick else DEFAULT_SIZES_CPU
    return QUICK_SIZES_ACCELERATOR if quick else DEFAULT_SIZES_ACCELERATOR


def flops(n: int) -> int:
    """A square matmul of side n: n^2 outputs of n multiply-adds, 2 flops each."""
    return 2 * n**3


@dataclass(frozen=True)
class MatmulOptions(ChipOptions):
    """A validated request; the CLI builds it, the probe child reads it back from JSON."""

    dtypes: tuple[str, ...] = DTYPES
    sizes: tuple[int, ...] | None = None  # matrix sides; None: the default for the platform


@dataclass(frozen=True)
class MatmulCell(Timing):
    """One device, one dtype, one size: C = A @ B with A and B square, timed in bursts of calls (figures per call)."""

    device: str  # "cpu:0", "cuda:3"
    dtype: str = field(metadata=json_schema(enum=DTYPES))
    n: int = field(metadata=json_schema(minimum=1))  # the matrices' side
    precision: str  # jax.lax.Precision of the dot: HIGHEST for f32 (full FP32 math), DEFAULT for bf16
    flops: int = field(metadata=json_schema(minimum=1))  # per call: 2 n^3
    tflops: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # flops / median, in 10^12 per second
    peak_tflops: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # from the fastest sample
    roof_tflops: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # the device kind's published dense peak for this dtype
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))
    verified: bool | None = None  # rows of the result checked against a reference; None: not checked (skipped)
    skipped: bool = False
    note: str | None = None  # why skipped, or what to know about the figure


@dataclass(frozen=True)
class MatmulReport:
    """`devctl bench matmul`: every device's TFLOP/s per dtype and size, and every device compared with its roof
    and its peers, dtype by dtype."""

    results: tuple[MatmulCell, ...]
    comparisons: tuple[Comparison, ...]  # one per dtype: each device's best TFLOP/s over the sizes
    devices: tuple[BenchDevice, ...]
    environment: ChipEnvironment
    method: str  # what was timed, in words
    gate: Gate | None = None  # --baseline: this run judged against earlier ones
    schema: str = field(default=SCHEMA, metadata=json_schema(const=SCHEMA))


def gate_figure(c: MatmulCell) -> Figure:
    return Figure.of((c.device, c.dtype, c.n), f"{c.device} {c.dtype} {c.n}x{c.n}", c.tflops, c)


# The regression gate (--baseline): a cell is one device, dtype and size, judged on its TFLOP/s.
GATE = GateSpec("bench matmul", SCHEMA, MatmulCell, {"device": str, "dtype": str, "n": int}, "tflops", "TFLOP/s", gate_figure)


METHOD = (
    "C = A @ B, square, on each device alone, jitted and compiled once (f32 at Precision.HIGHEST, bf16 at DEFAULT), each call "
    "writing C into the buffer the call before wrote; untimed warm-ups; a sample is a burst of calls dispatched back to "
    f"back and one block_until_ready, calibrated to last {BURST_MIN_S * 1e3:g} ms, figures per call; the devices take "
    "turns, one sample each; 2 n^3 flops per call; sampled rows of C are checked after the first call and after the last"
)
