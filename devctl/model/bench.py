"""What the benches share: the devices measured; and for `bench memory` and `bench matmul` (per-device benches) their
options, the run's environment, and the comparison of every device's headline figure with its published roof
and with its peers (the straggler rule).

Pure stdlib: the CLI, the collectors and the probe children all read these records.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict, TypeVar

from devctl.model import from_dict, json_schema, to_jsonable
from devctl.model.devices import DeviceRef
from devctl.model.stragglers import DEFAULT_FLOOR_PCT, DEFAULT_MAD_K, Straggler, find_stragglers

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

DEFAULT_REPEATS = 5
DEFAULT_MIN_TIME_S = 0.2
DEFAULT_WARMUPS = 2
QUICK_REPEATS = 5  # the straggler rule compares fastest calls: a few more give each device a quiet moment
QUICK_MIN_TIME_S = 0.02
QUICK_WARMUPS = 1
# How long a sample's burst of calls is calibrated to last: one launch + host sync (~0.2 ms on an H200) is then 1%.
BURST_MIN_S = 0.02


@dataclass(frozen=True)
class BenchDevice:
    """A device the benchmark measured, as the probe child saw it."""

    id: int = field(metadata=json_schema(minimum=0))
    name: str  # "cpu:0", "cuda:1"
    platform: str
    device_kind: str
    memory_kinds: tuple[str, ...] = ()
    bytes_limit: int | None = field(default=None, metadata=json_schema(minimum=0))  # memory_stats()'s, where the backend has one


class Request:
    """A bench's options as the CLI hands them to its probe child (JSON), which reads them back with from_request."""

    def to_request(self) -> dict[str, Any]:
        request: dict[str, Any] = to_jsonable(self)  # a DeviceRef travels as {"id": 1, "platform": "cpu"}
        return request

    @classmethod
    def from_request(cls: type[_R], data: dict[str, Any]) -> _R:
        return from_dict(cls, data)


_R = TypeVar("_R", bound=Request)


@dataclass(frozen=True)
class ChipOptions(Request):
    """What every per-device benchmark is asked: which devices, and how long to time each cell."""

    devices: tuple[DeviceRef, ...] | None = None  # None or (): every local device (the point is to compare them)
    repeats: int = DEFAULT_REPEATS
    min_time_s: float = DEFAULT_MIN_TIME_S
    warmups: int = DEFAULT_WARMUPS
    quick: bool = False


class _WholeRun(TypedDict, total=False):
    elapsed_s: Annotated[float, json_schema(minimum=0)]  # wall time of the whole run, as the CLI saw it


class RunEnvironment(_WholeRun):
    """What every bench's run was: versions, machine, settings (the probe child's plan, with devctl's additions)."""

    python: str
    jax: str
    jaxlib: str | None
    numpy: str
    backend: str | None  # the JAX client's platform
    platform_version: str | None
    hostname: str
    cpu_count: int | None
    cpu_affinity: list[int] | None  # CPUs the probe may run on
    xla_flags: str | None  # XLA_FLAGS as set
    jax_platforms: str | None  # JAX_PLATFORMS as set
    devctl: str  # devctl's version
    child_elapsed_s: Annotated[float | None, json_schema(minimum=0)]  # the probe child's own wall time
    repeats: Annotated[int, json_schema(minimum=1)]
    warmups: Annotated[int, json_schema(minimum=0)]
    quick: bool
    sweep_note: str | None  # sizes left out of the default sweep, and why


class ChipEnvironment(RunEnvironment):
    """What a bench memory or bench matmul run was: versions, machine, settings."""

    min_time_s: Annotated[float, json_schema(minimum=0)]
    burst_min_s: Annotated[float, json_schema(minimum=0)]  # how long a sample's burst of calls is calibrated to last


@dataclass(frozen=True)
class DeviceFigure:
    """One device's headline figure (its best median over the sizes measured) against its roof and its peers."""

    device: str  # "cpu:0", "cuda:3"
    device_kind: str
    value: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # best median figure over the sizes; None: nothing measured on this device
    size: int | None = field(default=None, metadata=json_schema(minimum=1))  # the size it was reached at (bytes, or a matrix's side)
    roof: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # the device kind's published peak, same unit
    pct_of_roof: float | None = field(default=None, metadata=json_schema(minimum=0))  # value as a percentage of roof
    fastest: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # the figure of its fastest call, at any size
    vs_median_pct: float | None = None  # 100 x (value / median of every device's value - 1): negative is slower than its peers
    straggler: bool = False  # named by the straggler rule


@dataclass(frozen=True)
class Comparison:
    """Every device's headline figure of one kind (copy GB/s, bf16 TFLOP/s), set against its roof and its peers."""

    metric: str  # what is compared: "copy", "bf16", "f32"
    unit: str  # "GB/s", "TFLOP/s"
    figures: tuple[DeviceFigure, ...]
    median: float | None = field(default=None, metadata=json_schema(exclusiveMinimum=0))  # of every device's figure
    stragglers: tuple[Straggler, ...] = ()  # worst first, each with its figure (best median) and its peers' median
    rule: str = ""  # the straggler rule, in words
    roof_name: str | None = None  # the peak's product and what it is ("H100 SXM dense BF16"); None: no peak known
    roof_source: str | None = None  # where the peak comes from
    roof_reason: str | None = None  # why there is no roof


def straggler_rule(floor_pct: float = DEFAULT_FLOOR_PCT, mad_k: float = DEFAULT_MAD_K) -> str:
    return (
        f"a device is a straggler when both its figure and its fastest call are below the median of the other "
        f"devices' by more than max({floor_pct:g}%, {mad_k:g} x 1.4826 x their MAD)"
    )


def compare(
    metric: str,
    unit: str,
    best: dict[str, tuple[float | None, int | None]],
    kinds: dict[str, str],
    roofs: dict[str, float | None],
    *,
    fastest: dict[str, float | None] | None = None,
    roof_name: str | None,
    roof_source: str | None,
    roof_reason: str | None,
) -> Comparison:
    """The comparison of one figure across devices.

    `best`: device -> (its best median value, the size it was reached at); `fastest`: device -> the figure of its
    fastest call (default: the best median). A device is a straggler when the rule (devctl.model.stragglers) names
    it on both: on a shared machine another job slows some calls of some devices, which can pull one device's
    median down, or leave the others one lucky quiet call; a device that is truly slow is slow on both counts.
    `kinds`: device -> device_kind; `roofs`: device -> the published peak for this metric (None: unknown). Higher
    is better for every figure here.
    """
    values = {d: v for d, (v, _) in best.items() if v}
    fast = {d: (fastest or {}).get(d) or v for d, v in values.items()}
    on_fastest = {s.name for s in find_stragglers(fast)}
    found = [s for s in find_stragglers(values) if s.name in on_fastest]
    slow = {s.name for s in found}
    median = statistics.median(values.values()) if values else None
    figures = []
    for device, (value, size) in best.items():
        roof = roofs.get(device)
        figures.append(
            DeviceFigure(
                device=device,
                device_kind=kinds.get(device, ""),
                value=value or None,
                size=size if value else None,
                roof=roof,
                pct_of_roof=100 * value / roof if value and roof else None,
                fastest=fast.get(device),
                vs_median_pct=100 * (value / median - 1) if value and median and len(values) > 1 else None,
                straggler=device in slow,
            )
        )
    return Comparison(
        metric, unit, tuple(figures), median, tuple(found), straggler_rule(), roof_name, roof_source, roof_reason
    )
