"""`devctl bench memory`: each device's memory bandwidth through a jitted copy, against its published HBM peak.

Pure stdlib: the CLI (which must not import jax or numpy) and the probe child both build and read these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devctl.model import json_schema
from devctl.model.bench import BURST_MIN_S, GIB, MIB, BenchDevice, ChipEnvironment, ChipOptions, Comparison
from devctl.model.gate import Figure, Gate, GateSpec
from devctl.model.timing import Timing
from devctl.units import format_size_short

SCHEMA = "devctl.bench.memory/2"

# Sizes of the array copied, per device. Each must leave the caches: an H100's L2 is 50 MB, a B200's 126 MB, and
# a CPU's last-level cache may be hundreds of MiB on a large host. The copy reads and writes the size once each.
DEFAULT_SIZES_ACCELERATOR = (256 * MIB, GIB, 4 * GIB)
DEFAULT_SIZES_CPU = (64 * MIB, 256 * MIB, GIB)
QUICK_SIZES = (256 * MIB,)
# The element the copy works on: 4 bytes, so an array's size is a multiple of 4 (sizes are rounded down to one).
ELEMENT_BYTES = 4
# A device holds two buffers of the size: the source and the (donated) destination; the check reduces in place.
DEVICE_COPIES = 2


def default_sizes(platform: str) -> tuple[int, ...]:
    return DEFAULT_SIZES_CPU if platform == "cpu" else DEFAULT_SIZES_ACCELERATOR


@dataclass(frozen=True)
class MemoryOptions(ChipOptions):
    """A validated request; the CLI builds it, the probe child reads it back from JSON."""

    sizes_bytes: tuple[int, ...] | None = None  # None: the default sweep for the platform (--quick: QUICK_SIZES)


@dataclass(frozen=True)
class MemoryCell(Timing):
    """One device at one size: y = x + 1 over a uint32 array, timed in bursts of calls (figures per call)."""

    device: str  # "cpu:0", "cuda:3"
    size_bytes: int = field(metadata=json_schema(minimum=1))  # the array copied
    bytes_moved: int | None = field(default=None, metadata=json_schema(minimum=0))  # read plus written per call: 2 x size_bytes
    gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # decimal GB/s of bytes_moved at the median
    peak_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # from the fastest sample
    roof_gbps: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # the device kind's published memory bandwidth
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))
    verified: bool | None = None  # the result was checked element by element; None: not checked (skipped)
    skipped: bool = False
    note: str | None = None  # why skipped, or what to know about the figure


@dataclass(frozen=True)
class MemoryReport:
    """`devctl bench memory`: every device's copy bandwidth per size, and every device compared with its roof and
    its peers."""

    results: tuple[MemoryCell, ...]
    comparison: Comparison  # each device's best GB/s over the sizes
    devices: tuple[BenchDevice, ...]
    environment: ChipEnvironment
    method: str  # what was timed, in words
    gate: Gate | None = None  # --baseline: this run judged against earlier ones
    schema: str = field(default=SCHEMA, metadata=json_schema(const=SCHEMA))


def gate_figure(c: MemoryCell) -> Figure:
    return Figure.of((c.device, c.size_bytes), f"{c.device} {format_size_short(c.size_bytes)}", c.gbps, c)


# The regression gate (--baseline): a cell is one device at one size, judged on its GB/s.
GATE = GateSpec("bench memory", SCHEMA, MemoryCell, {"device": str, "size_bytes": int}, "gbps", "GB/s", gate_figure)


METHOD = (
    "y = x + 1 over a uint32 array on one device, into a second buffer donated to the call (two buffers, ping-pong: "
    "each call reads what the one before wrote), jitted and compiled once; untimed warm-ups; a sample is a burst of "
    f"calls dispatched back to back and one block_until_ready, calibrated to last {BURST_MIN_S * 1e3:g} ms, figures per "
    "call; the devices take turns, one sample each; bytes moved = size read + size written; the result is checked "
    "after the first call and after the last (x + the number of calls)"
)
