"""Probe child for `devctl bench transfer`: every jax and numpy call of the benchmark lives here.

Run as `python -m devctl.probe.transfer '<TransferOptions as JSON>'`. Events:
  plan   {devices, environment, cells, sizes_bytes}   once, before the first measurement
  roof   {MemcpyRoof}                                  once per size
  cell   {Cell}                                        once per cell (also the watchdog's heartbeat)
  tick   {samples}                                     inside a long cell, so the watchdog knows it is alive
  done   {pcie, pcie_reason, elapsed_s}
  error  {kind: "usage", message}                      bad input only the child can see (an unknown device)

Method (reference/monitoring-and-transfer.md B.6): untimed warm-ups; every timed
call ends in block_until_ready (or returns host bytes); a fresh source for
every repetition wherever JAX would cache or consume it; host buffers filled
before any timing; statistics from the median; an alias of the source is
flagged zero-copy and given no bandwidth.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from devctl.model import bench as m
from devctl.model import to_jsonable
from devctl.probe.channel import emit, read_request, release_runtime
from devctl.units import format_bytes, format_size_short, percentile

# Above this many samples a cell has said all it can; tiny transfers would otherwise loop for the whole budget.
MAX_SAMPLES = 1000
# Wall-clock bound per cell, as a multiple of --min-time: untimed per-repetition setup (fresh arrays) also costs.
WALL_FACTOR = 4
# A prime period, so a shard or page landing at the wrong offset never matches the expected bytes by accident.
PATTERN_PERIOD = 65521
# The device may hold a source, a fresh copy and a result at once.
DEVICE_COPIES = 3
# While one cell runs longer than this, tell the parent's watchdog that work goes on.
HEARTBEAT_S = 2.0
# Read the PCIe link state after transfers at least this large (small ones may not wake a power-saving link).
LINK_SAMPLE_MIN_BYTES = 1 << 20

# Generation -> (GT/s per lane, encoding efficiency), reference B.4/B.5.
PCIE_GEN = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 236 / 256),  # FLIT mode: 236 payload bytes per 256-byte flit (approximate)
}


class UsageProblem(Exception):
    """Bad input the parent could not check (device ids): reported as an `error` event."""


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


@dataclass
class Transfer:
    """How to run one cell: untimed `prepare` per repetition, timed `op`, and what to compare."""

    op: Callable[[Any], Any]
    prepare: Callable[[], Any] = lambda: None
    sources: Callable[[Any], list] = lambda arg: []  # (address, nbytes) of what the result must not alias
    # Donation deletes the source: its addresses must be read before the call. Otherwise they are read
    # after it, because touching a fresh array first (even its buffer pointer) warms caches that
    # np.asarray would fill inside the timing, and would flatter a d2h by ~10 us.
    consumes_source: bool = False


def pcie_peak_gbps(gen: int | None, width: int | None) -> float | None:
    """Theoretical per-direction peak: GT/s x lanes x encoding / 8, decimal GB/s."""
    if gen not in PCIE_GEN or not width:
        return None
    gts, eff = PCIE_GEN[gen]
    return gts * width * eff / 8


def main() -> int:
    opts = m.TransferOptions.from_request(read_request())
    started = time.monotonic()
    try:
        import jax
        import numpy as np
    except Exception as e:  # a broken install is worth a line, not a traceback
        emit("error", kind="import", message=f"cannot import jax: {type(e).__name__}: {e}")
        return 1
    try:
        bench = Bench(opts, jax, np)
    except Exception as e:  # no backend could start: the parent reports it in one line
        emit("error", kind="backend", message=f"JAX found no usable device: {type(e).__name__}: {e}")
        return 1
    try:
        bench.resolve()
    except UsageProblem as e:
        emit("error", kind="usage", message=str(e))
        return 0
    bench.run()
    emit(
        "done",
        pcie=[to_jsonable(link) for link in bench.links.values()],
        pcie_reason=bench.pcie_reason,
        elapsed_s=round(time.monotonic() - started, 3),
    )
    return 0


class Bench:
    def __init__(self, opts: m.TransferOptions, jax, np):
        self.opts, self.jax, self.np = opts, jax, np
        self.local = list(jax.local_devices())
        self.links: dict[int, m.PcieLink] = {}
        self.pcie_reason: str | None = None

    # ---- planning -------------------------------------------------------------------------

    def resolve(self) -> None:
        by_id = {d.id: d for d in self.local}

        def dev(i: int, flag: str):
            if i not in by_id:
                ids = ", ".join(str(d.id) for d in self.local)
                kind = _name(self.local[0]).split(":")[0]
                raise UsageProblem(f"unknown device id {i} for {flag}; this host's {kind} devices are {ids}")
            return by_id[i]

        if self.opts.devices is None:
            self.targets = [self.local[0]]
        elif self.opts.devices == ():
            self.targets = list(self.local)
        else:
            self.targets = [dev(i, "--device") for i in self.opts.devices]
        src = dev(self.opts.src, "--src") if self.opts.src is not None else None
        dst = dev(self.opts.dst, "--dst") if self.opts.dst is not None else None
        self.pairs, self.matrix_pairs, self.pairs_note = self._pairs(src, dst)
        self.sizes, self.sweep_note = self._sizes()

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
            free = _device_free_bytes(d)
            if free is None:
                return False, f"{_name(d)} does not report its memory size"
            if free < DEVICE_COPIES * size * 2:
                return False, f"{_name(d)} has {format_bytes(free)} free"
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
                    for variant in self.opts.variants_for(direction, layout):
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

    # ---- running ----------------------------------------------------------------------------

    def run(self) -> None:
        groups = self.plan()
        self._read_pcie_links()
        emit(
            "plan",
            devices=[to_jsonable(_device_info(d)) for d in self.local],
            environment=self._environment(),
            cells=sum(len(g) for g in groups),
            sizes_bytes=self.sizes,
        )
        for size, specs in zip(self.sizes, groups):
            self._run_size(size, specs)

    def _run_size(self, size: int, specs: list[Spec]) -> None:
        np = self.np
        host_need = m.host_bytes_needed(
            self.opts, size, devices_in_host_memory=self._devices_share_host(), device_count=len(self.local)
        )  # the estimate `--sizes` is checked against in cli, measured (model.bench)
        avail = _host_available_bytes()
        if avail is not None and host_need > avail * 0.8:
            why = f"skipped: needs about {format_bytes(host_need)} of host memory, {format_bytes(avail)} available"
            emit("roof", **to_jsonable(m.MemcpyRoof(size, 0, None, None, why)))
            for s in specs:
                emit("cell", **to_jsonable(self._skipped(s, why)))
            return
        try:
            host = HostBuffers(np, size)
        except MemoryError:
            why = f"skipped: could not allocate {format_bytes(size)} of host memory"
            emit("roof", **to_jsonable(m.MemcpyRoof(size, 0, None, None, why)))
            for s in specs:
                emit("cell", **to_jsonable(self._skipped(s, why)))
            return
        roof = self._memcpy_roof(host)
        emit("roof", **to_jsonable(roof))
        for spec in specs:
            cell = self._run_cell(spec, host, roof)
            emit("cell", **to_jsonable(cell))
            gc.collect()  # free this cell's device buffers before the next one allocates
        del host
        gc.collect()

    def _devices_share_host(self) -> bool:
        return any(d.platform == "cpu" for d in self._devices_used())

    def _memcpy_roof(self, host: HostBuffers) -> m.MemcpyRoof:
        np = self.np
        src, dst = host.pattern, host.memcpy_dst
        samples = self._time(lambda: None, lambda _: np.copyto(dst, src), lambda arg: [])[0]
        stats = _stats(samples)
        gbps = host.size / stats["median_s"] / 1e9 if stats["median_s"] else None
        return m.MemcpyRoof(host.size, len(samples), stats["median_s"], gbps)

    def _run_cell(self, spec: Spec, host: HostBuffers, roof: m.MemcpyRoof) -> m.Cell:
        why = self._cannot_run(spec)
        if why:
            return self._skipped(spec, why)
        spec, note = self._fit_to_mesh(spec)
        try:
            transfer = self._transfer(spec, host)
            verified = self._verify(transfer, host, spec) if self.opts.verify else None
            # The verification is itself an untimed transfer of the same call: it counts as a warm-up.
            samples, moved_bytes = self._time(
                transfer.prepare, transfer.op, transfer.sources, transfer.consumes_source, warmed=verified is not None
            )
        except Exception as e:  # an out-of-memory or a backend refusal costs this cell, not the run
            return self._skipped(spec, _failure_note(e))
        finally:
            transfer = None
            gc.enable()
        self._sample_links(spec)
        return self._cell(spec, samples, moved_bytes, verified, roof, note)

    def _cannot_run(self, spec: Spec) -> str | None:
        if spec.direction == "d2d" and spec.dst is None:
            return "skipped: device-to-device needs at least 2 devices"
        if spec.layout != "single" and spec.direction == "d2d" and len(self.local) < 2:
            return "skipped: device-to-device needs at least 2 devices"
        if spec.variant == "pinned":
            dev = spec.dst if spec.direction == "h2d" else spec.src
            if "pinned_host" not in _memory_kinds(dev):
                return f"skipped: {_name(dev)} has no pinned_host memory"
        need = DEVICE_COPIES * spec.size
        for d in self._spec_devices(spec):
            free = _device_free_bytes(d)
            per_device = need // len(spec.devices) if spec.layout == "sharded" else need
            if free is not None and per_device > free:
                return f"skipped: needs about {format_bytes(per_device)} on {_name(d)}, {format_bytes(free)} free"
        return None

    def _spec_devices(self, spec: Spec) -> list:
        if spec.devices:
            return list(spec.devices)
        return [d for d in (spec.src, spec.dst) if d is not None and d != "mesh"]

    def _fit_to_mesh(self, spec: Spec) -> tuple[Spec, str | None]:
        """A sharded array must split evenly: round down to a multiple of the device count, and say so."""
        n = len(spec.devices)
        if spec.layout != "sharded" or spec.size % n == 0:
            return spec, None
        size = spec.size - spec.size % n
        return replace(spec, size=size), f"rounded down to {size} bytes, a multiple of {n} devices"

    # ---- the transfers ------------------------------------------------------------------------

    def _transfer(self, spec: Spec, host: HostBuffers) -> Transfer:
        if spec.layout != "single":
            return self._mesh_transfer(spec, host)
        return getattr(self, "_t_" + spec.direction.replace("-", "_"))(spec, host)

    def _t_h2d(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        dev = spec.dst
        if spec.variant == "pageable":
            src = host.pattern
            return Transfer(lambda _: jax.device_put(src, dev).block_until_ready(), sources=lambda _: _ranges(src))
        if spec.variant == "aligned":
            src = host.aligned()
            return Transfer(lambda _: jax.device_put(src, dev).block_until_ready(), sources=lambda _: _ranges(src))
        from jax.sharding import SingleDeviceSharding

        pinned = jax.device_put(host.pattern, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        pinned.block_until_ready()
        to_device = SingleDeviceSharding(dev, memory_kind="device")
        return Transfer(
            lambda _: jax.device_put(pinned, to_device).block_until_ready(), sources=lambda _: _ranges(pinned)
        )

    def _t_d2h(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax, np = self.jax, self.np
        master = self._on_device(host.pattern, spec.src)
        # JAX keeps the host copy of an array it has fetched once: every repetition needs a new array.
        fresh = lambda: jax.device_put(master, spec.src, may_alias=False).block_until_ready()
        if spec.variant == "numpy":
            op = np.asarray
        elif spec.variant == "copy":
            # One real host copy: on CPU np.asarray is a view, so copy explicitly; elsewhere
            # np.asarray already returns a fresh host copy, and np.array(copy=True) would time a second memcpy.
            op = (lambda a: np.array(a, copy=True)) if spec.src.platform == "cpu" else np.asarray
        elif spec.variant == "pinned":
            from jax.sharding import SingleDeviceSharding

            to_pinned = SingleDeviceSharding(spec.src, memory_kind="pinned_host")
            op = lambda a: np.asarray(jax.device_put(a, to_pinned, may_alias=False).block_until_ready())
        else:  # async

            def op(a):
                a.copy_to_host_async()
                return np.asarray(a)

        return Transfer(op, prepare=fresh, sources=_ranges)

    def _t_d2d(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        master = self._on_device(host.pattern, spec.src)
        if spec.variant == "put":
            return Transfer(
                lambda _: jax.device_put(master, spec.dst).block_until_ready(), sources=lambda _: _ranges(master)
            )
        fresh = lambda: jax.device_put(master, spec.src, may_alias=False).block_until_ready()
        return Transfer(
            lambda a: jax.device_put(a, spec.dst, donate=True).block_until_ready(),
            prepare=fresh,
            sources=_ranges,
            consumes_source=True,
        )

    def _t_d2d_self(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        dev = spec.src
        master = self._on_device(host.pattern, dev)
        # Without may_alias=False a same-device put returns its input: a no-op, not a copy (reference B.3).
        if spec.variant == "put":
            return Transfer(
                lambda _: jax.device_put(master, dev, may_alias=False).block_until_ready(),
                sources=lambda _: _ranges(master),
            )
        fresh = lambda: jax.device_put(master, dev, may_alias=False).block_until_ready()
        return Transfer(
            lambda a: jax.device_put(a, dev, may_alias=False, donate=True).block_until_ready(),
            prepare=fresh,
            sources=_ranges,
            consumes_source=True,
        )

    def _mesh_transfer(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax, np = self.jax, self.np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devices = list(spec.devices)
        part = PartitionSpec("x") if spec.layout == "sharded" else PartitionSpec()
        target = NamedSharding(Mesh(np.array(devices), ("x",)), part)
        src_host = host.pattern[: spec.size]
        if spec.direction == "h2d":
            return Transfer(
                lambda _: jax.device_put(src_host, target).block_until_ready(),
                sources=lambda _: _ranges(src_host),
            )
        if spec.direction == "d2d" and spec.layout == "replicated":
            # One array on the first device, broadcast to all: the copy that stays home may alias (and is not counted).
            master = self._on_device(src_host, spec.src)
            return Transfer(
                lambda _: jax.device_put(master, target).block_until_ready(),
                sources=lambda _: _ranges(master),
            )
        master = jax.device_put(src_host, target, may_alias=False).block_until_ready()
        master = jax.device_put(master, target, may_alias=False).block_until_ready()  # never an alias of host memory
        if spec.direction == "d2h":
            fresh = lambda: jax.device_put(master, target, may_alias=False).block_until_ready()
            return Transfer(np.asarray, prepare=fresh, sources=_ranges)
        if spec.direction == "d2d-self":
            return Transfer(
                lambda _: jax.device_put(master, target, may_alias=False).block_until_ready(),
                sources=lambda _: _ranges(master),
            )
        # d2d on a mesh: the same layout on the devices rotated by one, so every device sends to its neighbour at once.
        rotated = NamedSharding(Mesh(np.array(devices[1:] + devices[:1]), ("x",)), part)
        return Transfer(
            lambda _: jax.device_put(master, rotated).block_until_ready(),
            sources=lambda _: _ranges(master),
        )

    def _on_device(self, host_array, dev):
        """A device copy of host bytes that is sure not to alias them (CPU devices may alias aligned numpy)."""
        jax = self.jax
        a = jax.device_put(host_array, dev, may_alias=False).block_until_ready()
        if _overlaps(_ranges(a), _ranges(host_array)):
            a = jax.device_put(a, dev, may_alias=False).block_until_ready()
        return a

    # ---- timing, verification, statistics -------------------------------------------------------

    def _verify(self, transfer: Transfer, host: HostBuffers, spec: Spec) -> bool:
        """One untimed repetition whose bytes are compared with what was sent."""
        np = self.np
        out = transfer.op(transfer.prepare())
        got = np.asarray(out).reshape(-1)
        ok = got.shape[0] == spec.size and bool(np.array_equal(got, host.pattern[: spec.size]))
        del out, got
        return ok

    def _time(
        self, prepare, op, sources, consumes_source: bool = False, warmed: int = 0
    ) -> tuple[list[float], int | None]:
        """Warm-ups, then timed repetitions until both --repeats and --min-time are met.

        `warmed` counts untimed calls already made (the verification). Returns the
        samples in seconds and the bytes that really moved per call (result buffers
        that alias a source are not counted).
        """
        opts = self.opts
        for _ in range(max(opts.warmups - warmed, 0)):
            t0 = time.perf_counter()
            out = op(prepare())
            del out
            # One warm-up of a transfer longer than the whole time budget has warmed all there is.
            if time.perf_counter() - t0 >= opts.min_time_s:
                break
        emit("tick", samples=0)
        samples: list[float] = []
        moved: int | None = None
        timed = 0.0
        wall_start = last_beat = time.perf_counter()
        wall_cap = max(opts.min_time_s * WALL_FACTOR, 0.0)
        # A collection inside a timed call would be charged to the transfer.
        gc.disable()
        try:
            while True:
                arg = prepare()
                src = sources(arg) if consumes_source else None
                t0 = time.perf_counter_ns()
                out = op(arg)
                t1 = time.perf_counter_ns()
                if src is None:
                    src = sources(arg)
                got = _moved_bytes(_ranges(out), src)
                moved = got if moved is None else min(moved, got)
                del out, arg
                s = (t1 - t0) / 1e9
                samples.append(s)
                timed += s
                n = len(samples)
                now = time.perf_counter()
                if now - last_beat >= HEARTBEAT_S:
                    emit("tick", samples=n)
                    last_beat = now
                if n >= opts.repeats and (
                    timed >= opts.min_time_s
                    or n >= MAX_SAMPLES
                    or now - wall_start >= wall_cap
                ):
                    break
        finally:
            gc.enable()
        return samples, moved

    def _cell(self, spec: Spec, samples, moved, verified, roof: m.MemcpyRoof, note) -> m.Cell:
        st = _stats(samples)
        zero = moved == 0
        involved = _devices_involved(spec)
        gbps = None if zero or moved is None or not st["median_s"] else moved / st["median_s"] / 1e9
        peak = None if gbps is None else moved / st["min_s"] / 1e9
        per_dev = None if gbps is None else gbps / involved
        roof_kind, roof_gbps, roof_reason = self._roof_for(spec, roof)
        pct = None if gbps is None or not roof_gbps else 100 * gbps / roof_gbps
        notes = [n for n in (note, _zero_copy_note(spec) if zero else None) if n]
        if verified is False:
            notes.append("bytes did not arrive unchanged")
        return m.Cell(
            direction=spec.direction,
            variant=spec.variant,
            layout=spec.layout,
            size_bytes=spec.size,
            src=self._endpoint(spec.src, spec),
            dst=self._endpoint(spec.dst, spec),
            devices_involved=involved,
            bytes_moved=moved,
            samples=len(samples),
            gbps=gbps,
            peak_gbps=peak,
            per_device_gbps=per_dev,
            zero_copy=zero,
            verified=verified,
            roof=roof_kind,
            roof_gbps=roof_gbps,
            pct_of_roof=pct,
            roof_reason=roof_reason,
            note="; ".join(notes) or None,
            **st,
        )

    def _roof_for(self, spec: Spec, roof: m.MemcpyRoof) -> tuple[str | None, float | None, str | None]:
        devs = self._spec_devices(spec)
        if devs and all(d.platform == "cpu" for d in devs):
            # CPU "devices" live in host memory: every direction is a host memory copy.
            if roof.gbps is None:
                return None, None, roof.note or "host memcpy not measured"
            return "host_memcpy", roof.gbps, None
        if spec.direction in ("h2d", "d2h") and devs:
            links = [self.links.get(d.id) for d in devs]
            if all(link is not None and link.peak_gbps for link in links):
                if spec.layout == "replicated" and spec.direction == "d2h":
                    links = links[:1]
                # Several devices at once: their links add up (the host side may still be the limit).
                return "pcie", sum(link.peak_gbps for link in links), None
            known = [link.reason for link in links if link is not None and link.reason]
            reason = (known[0] if known else None) or self.pcie_reason or "PCIe link not known for this device"
            return None, None, reason
        return None, None, "no roof for this path (NVLink, ICI and HBM peaks are not queried)"

    def _endpoint(self, dev, spec: Spec) -> str:
        if dev is None:
            return "host"
        if dev == "mesh":
            return _name(spec.devices[0]).split(":")[0] + ":all"
        return _name(dev)

    def _skipped(self, spec: Spec, why: str) -> m.Cell:
        return m.Cell(
            direction=spec.direction,
            variant=spec.variant,
            layout=spec.layout,
            size_bytes=spec.size,
            src=self._endpoint(spec.src, spec),
            dst=self._endpoint(spec.dst, spec) if not (spec.direction == "d2d" and spec.dst is None) else "none",
            devices_involved=_devices_involved(spec),
            skipped=True,
            note=why,
        )

    # ---- PCIe (NVIDIA only) --------------------------------------------------------------------

    def _read_pcie_links(self) -> None:
        gpus = [d for d in self._devices_used() if d.platform == "gpu"]
        if not gpus:
            self.pcie_reason = "no GPU among the devices measured"
            return
        links, reason = read_nvml_links(gpus)
        self.links, self.pcie_reason = links, reason

    def _sample_links(self, spec: Spec) -> None:
        """The link may train down when idle: read the current state right after a large transfer."""
        if not self.links or spec.direction not in ("h2d", "d2h") or spec.size < LINK_SAMPLE_MIN_BYTES:
            return
        for d in self._spec_devices(spec):
            link = self.links.get(d.id)
            if link is not None and link.reason is None:
                self.links[d.id] = sample_link(link)

    def _environment(self) -> dict:
        jax, np = self.jax, self.np
        backend = self.local[0].client
        try:
            affinity = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = None
        return {
            "python": platform.python_version(),
            "jax": jax.__version__,
            "jaxlib": _version("jaxlib"),
            "numpy": np.__version__,
            "backend": getattr(backend, "platform", None),
            "platform_version": getattr(backend, "platform_version", None),
            "hostname": platform.node(),
            "cpu_count": os.cpu_count(),
            "cpu_affinity": affinity,
            "xla_flags": os.environ.get("XLA_FLAGS"),
            "jax_platforms": os.environ.get("JAX_PLATFORMS"),
            "sizes_bytes": self.sizes,
            "sweep_note": self.sweep_note,
            "pairs_note": self.pairs_note,
            "repeats": self.opts.repeats,
            "min_time_s": self.opts.min_time_s,
            "warmups": self.opts.warmups,
            "verify": self.opts.verify,
            "quick": self.opts.quick,
            "dtype": "uint8",
        }


class HostBuffers:
    """The host side of one size: a pattern-filled source placed like a numpy array, and a warm memcpy target."""

    def __init__(self, np, size: int):
        self.np, self.size = np, size
        # numpy's large arrays start 16 bytes into a page (malloc's header); XLA's CPU client aliases
        # 64-byte-aligned ones instead of copying. Placing the source at 16 mod 64 makes every size
        # behave like an ordinary numpy array, not alias at random when malloc happens to align it.
        self.pattern = _placed(np, size, align=64, offset=16)
        _fill_pattern(np, self.pattern)
        self.memcpy_dst = np.empty_like(self.pattern)
        self.memcpy_dst.fill(0)  # touch every page now, not inside the timing
        self._aligned = None

    def aligned(self):
        if self._aligned is None:
            self._aligned = _placed(self.np, self.size, align=4096, offset=0)
            self.np.copyto(self._aligned, self.pattern)
        return self._aligned


def _placed(np, size: int, *, align: int, offset: int):
    raw = np.empty(size + 2 * align, dtype=np.uint8)
    start = (offset - raw.ctypes.data) % align
    return raw[start : start + size]


def _fill_pattern(np, buf) -> None:
    block = ((np.arange(PATTERN_PERIOD, dtype=np.uint64) * 2654435761) >> 13).astype(np.uint8)
    whole = buf.shape[0] // PATTERN_PERIOD
    if whole:
        buf[: whole * PATTERN_PERIOD].reshape(whole, PATTERN_PERIOD)[:] = block
    tail = buf.shape[0] - whole * PATTERN_PERIOD
    buf[whole * PATTERN_PERIOD :] = block[:tail]


def _ranges(obj) -> list[tuple[int, int]]:
    """(address, nbytes) of every buffer behind a numpy or jax array; [] where the address is not exposed."""
    if obj is None:
        return []
    ctypes = getattr(obj, "ctypes", None)
    if ctypes is not None:  # numpy
        return [(ctypes.data, obj.nbytes)]
    try:
        return [(s.data.unsafe_buffer_pointer(), s.data.nbytes) for s in obj.addressable_shards]
    except Exception:
        return []


def _overlaps(a: list, b: list) -> bool:
    return any(p < q + nq and q < p + np_ for p, np_ in a for q, nq in b)


def _moved_bytes(result: list, sources: list) -> int:
    """Bytes of the result that are not the source's own memory."""
    return sum(n for p, n in result if not _overlaps([(p, n)], sources))


def _stats(samples: list[float]) -> dict:
    keys = ("min_s", "p10_s", "median_s", "p90_s", "max_s", "mean_s", "cv")
    if not samples:
        return dict.fromkeys(keys)
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n
    cv = None
    if n > 1 and mean > 0:
        var = sum((x - mean) ** 2 for x in s) / (n - 1)
        cv = var**0.5 / mean
    return {
        "min_s": s[0],
        "p10_s": percentile(s, 10),
        "median_s": percentile(s, 50),
        "p90_s": percentile(s, 90),
        "max_s": s[-1],
        "mean_s": mean,
        "cv": cv,
    }


def _devices_involved(spec: Spec) -> int:
    """Devices whose link carries bytes in this cell, for per-device GB/s."""
    if not spec.devices:
        return 1
    n = len(spec.devices)
    if spec.layout == "replicated" and spec.direction == "d2h":
        return 1  # np.asarray of a replicated array reads one replica
    if spec.layout == "replicated" and spec.direction == "d2d":
        return max(n - 1, 1)  # a broadcast from the first device: the others receive
    return n


def _zero_copy_note(spec: Spec) -> str:
    if spec.variant == "donate" and spec.direction == "d2d-self":
        return "zero-copy: the donated buffer is handed over, nothing is copied"
    if spec.direction == "d2h":
        return "zero-copy: np.asarray returns a view of the device buffer on this backend"
    if spec.direction == "h2d":
        return "zero-copy: the device array aliases the numpy buffer"
    if spec.direction == "d2d-self":
        return "zero-copy: this jax ignores may_alias=False for a same-device put (jax 0.6 and later copy)"
    return "zero-copy: the result aliases the source"


def _failure_note(e: BaseException) -> str:
    text = " ".join(str(e).split())
    first = text.split(". ")[0][:200]
    if isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
        return f"skipped: out of memory ({first})"
    return f"failed: {type(e).__name__}: {first}"


def _name(dev) -> str:
    platform_name = getattr(getattr(dev, "client", None), "platform", None) or dev.platform
    return f"{platform_name}:{dev.id}"


def _memory_kinds(dev) -> tuple[str, ...]:
    try:
        return tuple(mem.kind for mem in dev.addressable_memories())
    except Exception:
        return ()


def _device_stats(dev) -> dict:
    try:
        return dev.memory_stats() or {}
    except Exception:
        return {}


def _device_free_bytes(dev) -> int | None:
    if dev.platform == "cpu":
        return None  # CPU devices report no memory of their own; the host check covers them
    st = _device_stats(dev)
    limit = st.get("bytes_limit")
    if not limit:
        return None
    return max(int(limit) - int(st.get("bytes_in_use", 0)), 0)


def _device_info(dev) -> m.DeviceInfo:
    limit = _device_stats(dev).get("bytes_limit")
    return m.DeviceInfo(
        id=dev.id,
        name=_name(dev),
        platform=dev.platform,
        device_kind=dev.device_kind,
        memory_kinds=_memory_kinds(dev),
        bytes_limit=int(limit) if limit else None,
    )


def _host_available_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:
        return None


# ---- NVML ------------------------------------------------------------------------------------------


def read_nvml_links(gpus: list) -> tuple[dict[int, m.PcieLink], str | None]:
    """Each GPU's PCIe link from NVML, keyed by jax device id; NVML's absence is normal and only recorded."""
    try:
        import pynvml
    except ImportError:
        return {}, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return {}, f"NVML unavailable: {e}"
    links = {}
    for d in gpus:
        links[d.id] = _nvml_link(pynvml, d)
    return links, None


def _nvml_handle(pynvml, dev):
    """NVML's handle for a jax GPU device, by the PCI bus id CUDA gives for it (the probe's lookup)."""
    from devctl.probe.backends import cuda_pci_bus_id

    bus = getattr(dev, "pci_bus_id", None) or cuda_pci_bus_id(dev.local_hardware_id)
    if bus:
        return pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    # No bus id (no libcuda to ask): CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's ordinals NVML's indexes.
    ordinal = dev.local_hardware_id if dev.local_hardware_id is not None else dev.id
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return pynvml.nvmlDeviceGetHandleByIndex(ordinal)
    raise LookupError(f"cannot tell which NVML GPU is CUDA device {ordinal}: no PCI bus id from CUDA")


def _nvml_link(pynvml, dev) -> m.PcieLink:
    name = _name(dev)
    try:
        h = _nvml_handle(pynvml, dev)
        bus = pynvml.nvmlDeviceGetPciInfo(h).busId
        bus = bus.decode() if isinstance(bus, bytes) else bus
        max_gen = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
        max_width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
    except Exception as e:
        return m.PcieLink(device=name, reason=f"NVML could not read the link: {e}")
    try:
        gpu_max = pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)
    except Exception:
        gpu_max = None
    link = m.PcieLink(
        device=name,
        pci_bus_id=bus,
        max_gen=max_gen,
        max_width=max_width,
        gpu_max_gen=gpu_max,
        peak_gbps=pcie_peak_gbps(max_gen, max_width),
    )
    if link.peak_gbps is None:
        return replace(link, reason=f"unknown PCIe generation {max_gen}")
    return link


def sample_link(link: m.PcieLink) -> m.PcieLink:
    """Fold the current generation and width into the highest seen so far."""
    try:
        import pynvml

        h = pynvml.nvmlDeviceGetHandleByPciBusId(link.pci_bus_id)
        gen = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
        width = pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
    except Exception:
        return link
    seen_gen = max(gen, link.seen_gen or 0)
    seen_width = max(width, link.seen_width or 0)
    below = seen_gen < (link.max_gen or 0) or seen_width < (link.max_width or 0)
    return replace(link, seen_gen=seen_gen, seen_width=seen_width, below_max=below)


if __name__ == "__main__":
    code = main()
    # Leave as the backend probe does: past the runtimes' exit-time destructors (some hang or abort),
    # undoing first what libtpu's exit handler would have undone.
    sys.stdout.flush()
    release_runtime()
    os._exit(code)
