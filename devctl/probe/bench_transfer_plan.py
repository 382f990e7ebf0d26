"""What `devctl bench transfer` will measure: the devices its flags name, resolved once against
jax.local_devices(), and the cells (direction x variant x layout x size x device pair) that fit."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from devctl.model import bench_transfer as m
from devctl.probe.bench import (
    CPU_DEVICES_HINT,
    UsageProblem,
    device_free_bytes,
    device_name,
    find_device,
    local_devices,
    memory_kinds,
    resolve_devices,
)
from devctl.units import format_bytes, format_size_short


@dataclass(frozen=True)
class Spec:
    """What one cell measures; the devices are jax Device objects."""

    direction: str
    variant: str
    layout: str
    size: int
    src: Any  # Device, None (host) or "mesh"
    dst: Any
    devices: tuple = ()  # the mesh's devices for sharded/replicated layouts


# The device may hold a source, a fresh copy and a result at once.
DEVICE_COPIES = 3


def devices_involved(spec: Spec) -> int:
    """Devices whose link carries bytes in this cell, for per-device GB/s."""
    if not spec.devices:
        return 1
    n = len(spec.devices)
    if spec.layout == "replicated" and spec.direction == "d2h":
        return 1  # np.asarray of a replicated array reads one replica
    if spec.layout == "replicated" and spec.direction == "d2d":
        return max(n - 1, 1)  # a broadcast from the first device: the others receive
    return n


def zero_copy_note(spec: Spec) -> str:
    if spec.variant == "donate" and spec.direction == "d2d-self":
        return "zero-copy: the donated buffer is handed over, nothing is copied"
    if spec.direction == "d2h":
        return "zero-copy: np.asarray returns a view of the device buffer on this backend"
    if spec.direction == "h2d":
        return "zero-copy: the device array aliases the numpy buffer"
    if spec.direction == "d2d-self":
        return "zero-copy: this jax ignores may_alias=False for a same-device put (jax 0.6 and later copy)"
    return "zero-copy: the result aliases the source"


class Plan:
    """The cells of one run, from the options and the devices JAX gives this process."""

    def __init__(self, opts: m.TransferOptions, jax, np):
        self.opts, self.jax, self.np = opts, jax, np
        self.local = local_devices(jax)
        self.links: dict[int, m.PcieLink] = {}
        self.pcie_reason: str | None = None

    def resolve(self) -> None:
        dev = partial(find_device, self.local)
        self.targets = [self.local[0]] if self.opts.devices is None else resolve_devices(self.opts, self.local)
        if set(self.opts.directions) == {"d2d"} and len(self.local) < 2:
            cpu = CPU_DEVICES_HINT if self.local[0].platform == "cpu" else ""
            raise UsageProblem(f"-d d2d copies between devices, and this host has one ({device_name(self.local[0])}): -d d2d-self measures on-device copies{cpu}")
        src = dev(self.opts.src, "--src") if self.opts.src is not None else None
        dst = dev(self.opts.dst, "--dst") if self.opts.dst is not None else None
        self.pairs, self.matrix_pairs, self.pairs_note = self._pairs(src, dst)
        self.sizes, self.sweep_note = self._sizes()
        # The default adds pinned h2d and d2h where a device measured has pinned_host memory of its own.
        self.pinned_path = any(m.pinned_is_a_path(d.platform, memory_kinds(d)) for d in self.targets)

    def variants_for(self, direction: str, layout: str) -> tuple[str, ...]:
        return self.opts.variants_for(direction, layout, pinned_path=self.pinned_path)

    def _pairs(self, src, dst) -> tuple[list, list, str | None]:
        """The d2d pairs swept over every size, those measured only at the largest size, and why not more."""
        others = lambda d: [o for o in self.local if o.id != d.id]
        every = [(a, b) for a in self.local for b in self.local if a.id != b.id]
        if src is not None and dst is not None:
            return [(src, dst)], [], None
        if src is not None:
            return [(src, o) for o in others(src)], [], None
        if dst is not None:
            return [(o, dst) for o in others(dst)], [], None
        if len(self.local) < 2:
            return [], [], None
        if self.opts.all_pairs:
            return every, [], None
        first = self.targets[0]
        nxt = self.local[(self.local.index(first) + 1) % len(self.local)]
        sweep = [(first, nxt)]
        if self.opts.quick:
            return sweep, [], None
        if first.platform == "cpu":
            # Every pair of CPU devices is the same copy within one host memory: a matrix would say nothing new.
            return sweep, [], "d2d pair matrix not measured: CPU devices share host memory (use --all-pairs)"
        # nvbandwidth's view: every ordered pair, once, at one large size.
        return sweep, [p for p in every if p not in sweep], None

    def _sizes(self) -> tuple[list[int], str | None]:
        if self.opts.sizes_bytes is not None:
            return list(self.opts.sizes_bytes), None
        if self.opts.quick:
            return list(m.QUICK_SIZES), None
        sizes = list(m.DEFAULT_SIZES)
        room, why = self._room_for(m.LARGE_SIZE)
        if room:
            return sizes + [m.LARGE_SIZE], None
        return sizes, f"default sweep stops at {format_size_short(sizes[-1])}: {why}"

    def _room_for(self, size: int) -> tuple[bool, str]:
        """1 GiB joins the default sweep only where every device used says it has several times that free."""
        for d in self._devices_used():
            free = device_free_bytes(d)
            if free is None:
                return False, f"{device_name(d)} does not report its memory size"
            if free < DEVICE_COPIES * size * 2:
                return False, f"{device_name(d)} has {format_bytes(free)} free"
        return True, ""

    def _devices_used(self) -> list:
        used = list(self.targets)
        if "d2d" in self.opts.directions:
            for a, b in self.pairs + self.matrix_pairs:
                used += [a, b]
        if self.opts.layouts != ("single",):
            used += self.local
        return list({d.id: d for d in used}.values())

    def plan(self) -> list[list[Spec]]:
        """Cells grouped by size (host buffers are made once per size)."""
        top = self.sizes[-1] if self.sizes else 0
        groups = []
        for size in self.sizes:
            specs = []
            for layout in self.opts.layouts:
                for direction in self.opts.directions:
                    for variant in self.variants_for(direction, layout):
                        specs += self._specs(direction, variant, layout, size, top)
            groups.append(specs)
        return groups

    def _specs(self, direction: str, variant: str, layout: str, size: int, top: int) -> list[Spec]:
        if layout != "single":
            mesh = tuple(self.local)
            if direction == "d2d" and layout == "replicated":
                return [Spec(direction, variant, layout, size, self.local[0], "mesh", mesh)]
            src = None if direction == "h2d" else "mesh"
            dst = None if direction == "d2h" else "mesh"
            return [Spec(direction, variant, layout, size, src, dst, mesh)]
        if direction == "h2d":
            return [Spec(direction, variant, layout, size, None, d) for d in self.targets]
        if direction == "d2h":
            return [Spec(direction, variant, layout, size, d, None) for d in self.targets]
        if direction == "d2d-self":
            return [Spec(direction, variant, layout, size, d, d) for d in self.targets]
        matrix = self.matrix_pairs if size == top and variant == m.main_variant(direction) else []
        pairs = list(self.pairs) + matrix
        if not pairs:
            return [Spec(direction, variant, layout, size, self.targets[0], None)]
        return [Spec(direction, variant, layout, size, a, b) for a, b in pairs]
