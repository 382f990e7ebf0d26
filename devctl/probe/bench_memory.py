"""Probe child for `devctl bench memory`: each device's memory bandwidth through a jitted copy.

Run as `python -m devctl.probe.bench_memory '<MemoryOptions as JSON>'`. Events:
  plan   {devices, environment, cells, sizes_bytes}   once, before the first measurement
  cell   {MemoryCell}                                  once per device and size, a size's after all its devices ran
  tick   {samples}                                     inside a long cell
  done   {elapsed_s}
  error  {kind, message}                               kind "usage": bad input only the child can see

The copy is y = x + 1 over uint32: XLA cannot fold it away (x + 0 may be simplified to x, and a jitted identity may
hand back its input), it reads every byte once and writes every byte once, into a second buffer donated to it (two
buffers, ping-pong), and its result is checked (y - x == 1 everywhere, on the device) so an elided or aliased copy
fails its cell instead of reporting a bandwidth.

Timed in bursts (devctl.probe.bench): each call reads the array the call before it wrote, so the calls of a burst
run one after another and none can be skipped: after N calls the array holds x + N, and the cell checks that it
does after its last call (a burst that dropped or merged calls fails its cell).
"""

from __future__ import annotations

import gc
import os
import sys
import time

from devctl.model import bench_memory as m
from devctl.model import to_jsonable
from devctl.model.peaks import peak_for
from devctl.probe.bench import (
    MIN_CALLS,
    Timing,
    environment,
    failure_note,
    prepare_and_time,
    start,
)
from devctl.probe.channel import emit, read_request, release_runtime
from devctl.probe.transfer_devices import device_info, device_name
from devctl.units import format_size_short


def main() -> int:
    opts = m.MemoryOptions.from_request(read_request())
    started = time.monotonic()
    began = start(opts)
    if isinstance(began, int):
        return began
    jax, np, local, devices = began
    sizes, note = plan_sizes(opts, devices[0].platform)
    emit(
        "plan",
        devices=[to_jsonable(device_info(d)) for d in devices],
        environment=environment(jax, np, local, opts, note),
        cells=len(devices) * len(sizes),
        sizes_bytes=sizes,
    )
    for size in sizes:
        for c in measure_size(jax, devices, size, opts):
            emit("cell", **to_jsonable(c))
        gc.collect()  # free this size's buffers before the next one allocates
    emit("done", elapsed_s=round(time.monotonic() - started, 3))
    return 0


def plan_sizes(opts: m.MemoryOptions, platform: str) -> tuple[list[int], str | None]:
    if opts.sizes_bytes is not None:
        return list(opts.sizes_bytes), None
    if opts.quick:
        return list(m.QUICK_SIZES), "--quick: one size; the default sweep is " + _sizes_text(m.default_sizes(platform))
    return list(m.default_sizes(platform)), None


def _sizes_text(sizes) -> str:
    return ", ".join(format_size_short(s) for s in sizes)


class Copy:
    """One device's two buffers and its compiled copy: each call reads one buffer and writes the other, so every
    call reads what the call before it wrote (x + 1, x + 2, ...)."""

    def __init__(self, jax, dev, elements: int):
        import jax.numpy as jnp
        import numpy as np

        self.np = np
        one = jnp.uint32(1)
        # Made on the device and committed to it, so the compiled copy runs there (an uncommitted array would let
        # JAX compile for the default device and move the data first).
        on_dev = jax.sharding.SingleDeviceSharding(dev)
        make = jax.jit(lambda: (jnp.arange(elements, dtype=jnp.uint32), jnp.zeros(elements, dtype=jnp.uint32)), out_shardings=on_dev)
        self.bufs = list(make())
        # Ping-pong between two buffers: the destination is handed (donated) to the call for its result. A fresh
        # result buffer per call would time the allocator's page faults (on CPU, a new mmap per call), not the
        # memory. keep_unused: the donated destination is not read, and must not be dropped from the call.
        self.copy = jax.jit(lambda src, dst: src + one, donate_argnums=1, keep_unused=True).lower(*self.bufs).compile()
        check = jax.jit(lambda a, b: jnp.all(b - a == one))
        # After N calls the array is x + N (mod 2^32), x being 0, 1, 2, ...: the iota is fused into the reduction.
        self._count_check = jax.jit(lambda y, n: jnp.all(y - jnp.arange(elements, dtype=jnp.uint32) == n))
        target = self.bufs[1].unsafe_buffer_pointer()
        out = self.copy(self.bufs[0], self.bufs[1])
        self.calls = 1
        self.verified = bool(check(self.bufs[0], out)) and out.unsafe_buffer_pointer() != self.bufs[0].unsafe_buffer_pointer()
        self.in_place = out.unsafe_buffer_pointer() == target
        # A backend that ignored the donation allocates every result: a burst must not hold many of them at once.
        self.max_burst = None if self.in_place else MIN_CALLS
        self.bufs = [out, self.bufs[0]]

    def __call__(self):
        out = self.copy(self.bufs[0], self.bufs[1])
        self.bufs[:] = [out, self.bufs[0]]
        self.calls += 1
        return out

    def every_call_ran(self) -> bool:
        """Whether the array now holds x + the number of calls made: every call of every burst read the result of
        the one before and wrote its own."""
        return bool(self._count_check(self.bufs[0], self.np.uint32(self.calls % (1 << 32))))


def measure_size(jax, devices: list, size: int, opts: m.MemoryOptions) -> list[m.MemoryCell]:
    """Every device at one size: each prepared (or skipped, with why), then timed taking turns."""
    elements = size // m.ELEMENT_BYTES
    if elements == 0:
        tiny = f"skipped: smaller than one {m.ELEMENT_BYTES}-byte element"
        return [m.MemoryCell(device_name(d), size, skipped=True, note=tiny) for d in devices]
    used = elements * m.ELEMENT_BYTES
    what = f"{format_size_short(size)} (source and destination)"
    ready, timings, skipped = prepare_and_time(devices, m.DEVICE_COPIES * used, what, lambda dev: Copy(jax, dev, elements), opts)
    rounded = None if used == size else f"rounded down to {used} bytes, a whole number of uint32 elements"
    cells = []
    for dev in devices:
        name = device_name(dev)
        if name not in timings:
            cells.append(m.MemoryCell(name, size, skipped=True, note=skipped.get(name, "skipped")))
            continue
        copy = ready[name]
        notes = [rounded] if rounded else []
        if not copy.in_place:
            notes.append(f"the backend did not reuse the donated buffer: each call also allocated its result, and a burst holds {MIN_CALLS} calls")
        if not copy.verified:
            notes.append("the result was wrong (y != x + 1 or the input's own buffer): no bandwidth reported")
        else:
            try:
                copy.verified = copy.every_call_ran()
                if not copy.verified:
                    notes.append(f"after {copy.calls} calls the array is not x + {copy.calls}: calls were skipped or merged, no bandwidth reported")
            except Exception as e:  # the check could not run (out of memory): the figure stands unverified
                copy.verified = False
                notes.append(f"the final check could not run ({failure_note(e)}): no bandwidth reported")
        cells.append(cell(dev, name, size, used, timings[name], copy.verified, "; ".join(notes) or None))
    ready.clear()
    return cells


def cell(dev, name: str, size: int, used: int, timing: Timing, verified: bool, note: str | None) -> m.MemoryCell:
    st = timing.stats()
    moved = 2 * used  # every byte read once and written once
    gbps = moved / st["median_s"] / 1e9 if verified and st["median_s"] else None
    peak = moved / st["min_s"] / 1e9 if gbps and st["min_s"] else None
    known = peak_for(dev.device_kind)
    roof = known.hbm_gbps if known is not None else None
    return m.MemoryCell(
        device=name,
        size_bytes=size,
        bytes_moved=moved,
        gbps=gbps,
        peak_gbps=peak,
        roof_gbps=roof,
        pct_of_roof=100 * gbps / roof if gbps and roof else None,
        verified=verified,
        note=note,
        **st,
    )


if __name__ == "__main__":
    code = main()
    # Leave as the other probes do: past the runtimes' exit-time destructors, undoing what libtpu's would have.
    sys.stdout.flush()
    release_runtime()
    os._exit(code)
