"""Probe child for `devctl bench memory` (`python -m devctl.probe.bench_memory '<MemoryOptions as JSON>'`): each
device's memory bandwidth through a jitted copy, a recipe of the engine (devctl.probe.bench, whose events it emits).

The copy is y = x + 1 over uint32: XLA cannot fold it away (x + 0 may be simplified to x, and a jitted identity may
hand back its input), it reads every byte once and writes every byte once, into a second buffer donated to it (two
buffers, ping-pong), and its result is checked (y - x == 1 everywhere, on the device) so an elided or aliased copy
fails its cell instead of reporting a bandwidth. Timed in bursts (devctl.probe.bench), each call reading what the
call before it wrote, and checked after the last (Copy.last_problem).
"""

from __future__ import annotations

from devctl.model import bench_memory as m
from devctl.model.peaks import peak_for
from devctl.probe.bench import MIN_CALLS, Group, Recipe, run_recipe
from devctl.probe.channel import exit_child
from devctl.units import format_size_short

RECIPE = Recipe(
    work=lambda c: c.bytes_moved,
    scale=1e9,
    fields=("gbps", "peak_gbps", "roof_gbps"),
    roof=lambda dev, c: getattr(peak_for(dev.device_kind), "hbm_gbps", None),
    wrong=lambda c: "the result was wrong (y != x + 1 or the input's own buffer): no bandwidth reported",
    unit_word="bandwidth",
)


def main() -> int:
    return run_recipe(m.MemoryOptions, RECIPE, plan)


def plan(opts: m.MemoryOptions, jax, np, platform: str) -> tuple[list[Group], str | None, dict]:
    sizes = list(opts.sizes_bytes) if opts.sizes_bytes is not None else list(m.QUICK_SIZES if opts.quick else m.default_sizes(platform))
    note = None
    if opts.sizes_bytes is None and opts.quick:
        note = "--quick: one size; the default sweep is " + ", ".join(format_size_short(s) for s in m.default_sizes(platform))
    return [group(jax, size) for size in sizes], note, {"sizes_bytes": sizes}


def group(jax, size: int) -> Group:
    """Every device at one size: y = x + 1 over the whole uint32 elements the size holds."""
    elements = size // m.ELEMENT_BYTES
    used = elements * m.ELEMENT_BYTES
    if elements == 0:
        return Group(lambda name: m.MemoryCell(name, size), 0, f"skipped: smaller than one {m.ELEMENT_BYTES}-byte element", None)
    rounded = () if used == size else (f"rounded down to {used} bytes, a whole number of uint32 elements",)
    return Group(
        lambda name: m.MemoryCell(name, size, bytes_moved=2 * used),  # every byte read once and written once
        m.DEVICE_COPIES * used,
        f"{format_size_short(size)} (source and destination)",
        lambda dev: Copy(jax, dev, elements),
        rounded,
    )


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

    def last_problem(self) -> str | None:
        """Whether the array now holds x + the number of calls made: every call of every burst read the result of
        the one before and wrote its own."""
        if bool(self._count_check(self.bufs[0], self.np.uint32(self.calls % (1 << 32)))):
            return None
        return f"after {self.calls} calls the array is not x + {self.calls}: calls were skipped or merged, no bandwidth reported"


if __name__ == "__main__":
    exit_child(main)
