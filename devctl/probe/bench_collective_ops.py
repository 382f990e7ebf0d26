"""The collectives `devctl bench collective` times, as a JAX program writes them: shard_map over one mesh axis, jitted.

Runs in the probe child only (jax is passed in or imported inside functions). Every collective takes one
array sharded over every mesh axis, each device holding its own block, and works along one named axis only,
so the other axes are independent groups doing the same at once (what `--mesh data=2,model=4` means to a
JAX user sharding a model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from devctl.model import bench_collective as m


def import_shard_map():
    """shard_map and where it came from: jax.shard_map since jax 0.6-0.7; jax.experimental.shard_map before
    (jax 0.4.36, the oldest devctl supports), which newer jax removed."""
    try:
        from jax import shard_map

        return shard_map, "jax.shard_map"
    except ImportError:
        from jax.experimental.shard_map import shard_map  # type: ignore[no-redef]

        return shard_map, "jax.experimental.shard_map"


@dataclass
class Layout:
    """The mesh, and per axis its groups' devices."""

    mesh: Any  # jax.sharding.Mesh
    names: tuple[str, ...]
    shape: tuple[int, ...]

    def spec(self):
        from jax.sharding import PartitionSpec as P

        return P(self.names)  # dimension 0 over every axis: each device its own block


def build_mesh(jax, np, devices: list, axes: tuple[tuple[str, int], ...]) -> Layout:
    from jax.sharding import Mesh

    shape = tuple(size for _, size in axes)
    names = tuple(name for name, _ in axes)
    grid = np.array(devices, dtype=object).reshape(shape)
    return Layout(Mesh(grid, names), names, shape)


def axis_groups(layout: Layout, np, axis: str) -> list[list]:
    """Every group of devices that runs one collective along `axis` together, each in axis order."""
    grid = np.asarray(layout.mesh.devices)
    k = layout.names.index(axis)
    moved = np.moveaxis(grid, k, -1).reshape(-1, layout.shape[k])
    return [list(row) for row in moved]


def elements(collective: str, size: int, n: int, itemsize: int) -> tuple[int, int]:
    """(elements of each device's input block, the size actually measured): every split must be whole elements,
    so S rounds down to a multiple of n x itemsize where needed (all-to-all splits its block in n, all-gather
    takes S/n in, reduce-scatter returns S/n)."""
    quantum = itemsize * (n if collective in ("all-gather", "reduce-scatter", "all-to-all") else 1)
    size = size - size % quantum
    return m.input_bytes(collective, size, n) // itemsize, size


def collective_body(jax, collective: str, axis: str, n: int, pair: tuple[int, int] | None = None):
    """The per-device function shard_map runs: the collective alone, nothing else timed with it."""
    lax = jax.lax
    if collective == "all-reduce":
        return lambda x: lax.psum(x, axis)
    if collective == "all-gather":
        return lambda x: lax.all_gather(x, axis, tiled=True)
    if collective == "reduce-scatter":
        return lambda x: lax.psum_scatter(x, axis, tiled=True)
    if collective == "all-to-all":
        return lambda x: lax.all_to_all(x, axis, 0, 0, tiled=True)
    if collective == "ppermute":
        ring = [(i, (i + 1) % n) for i in range(n)]
        return lambda x: lax.ppermute(x, axis, ring)
    if collective == "ppermute-pair" and pair is not None:
        return lambda x: lax.ppermute(x, axis, [pair])
    raise ValueError(f"unknown collective {collective!r}")


def compiled_collective(jax, layout: Layout, collective: str, axis: str, n: int, x, pair: tuple[int, int] | None = None):
    """jit(shard_map(...)) lowered and compiled once for `x`: the timed calls run the executable, never a trace."""
    shard_map, _ = import_shard_map()
    body = collective_body(jax, collective, axis, n, pair)
    fn = shard_map(body, mesh=layout.mesh, in_specs=layout.spec(), out_specs=layout.spec())
    return jax.jit(fn).lower(x).compile()


# Each device's input block holds one value: its position along the axis measured, mod 7, plus 1. Small integers,
# exact in every dtype measured (int8 and bfloat16 included) even summed over 36 ranks; different in every group of
# up to 7 devices and between neighbours in every group, so a collective that moved the wrong block, or none, gives
# a wrong result. (From the block's index in the whole mesh, the devices of a group on an axis whose stride is a
# multiple of 7 all held the same value, and a collective that moved nothing passed.)
_VALUES = 7


def block_value(position: int) -> int:
    return position % _VALUES + 1


def make_input(jax, layout: Layout, local_elements: int, dtype: str, axis: str):
    """The sharded input, created on the devices themselves (no host copy; every process of a cluster makes its own
    shards the same way): each device's block filled with block_value of its position along `axis`."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    blocks = math.prod(layout.shape)
    k = layout.names.index(axis)
    stride, size = math.prod(layout.shape[k + 1 :]), layout.shape[k]  # blocks are in row-major mesh order
    sharding = NamedSharding(layout.mesh, layout.spec())

    def make():
        position = jnp.arange(blocks, dtype=jnp.int32) // stride % size
        values = (position % _VALUES + 1).astype(jnp.dtype(dtype))
        return jnp.broadcast_to(values[:, None], (blocks, local_elements)).reshape(blocks * local_elements)

    x = jax.jit(make, out_shardings=sharding)()
    x.block_until_ready()
    return x


# Elements of each output block checked: all of a small block, an even spread of a large one (every chunk of an
# all-gather or all-to-all has some), fetched from the device alone.
CHECK_ELEMENTS = 4096


def expected(np, collective: str, position: int, values: list[int], length: int, at, pair: tuple[int, int] | None = None):
    """What the output block of the device at `position` on its axis group holds at indices `at`: `values` are the
    group's input values in axis order, `length` its output block's length."""
    n = len(values)
    if collective in ("all-reduce", "reduce-scatter"):
        return np.full(len(at), sum(values))
    if collective in ("all-gather", "all-to-all"):  # chunk k of the block came from rank k
        return np.asarray(values)[np.asarray(at) // (length // n)]
    if collective == "ppermute":  # the ring i -> i+1
        return np.full(len(at), values[(position - 1) % n])
    if collective == "ppermute-pair" and pair is not None:  # only the destination receives; the others get zeros
        return np.full(len(at), values[pair[0]] if position == pair[1] else 0)
    raise ValueError(f"unknown collective {collective!r}")


def block_is_right(np, collective: str, position: int, values: list[int], block, pair: tuple[int, int] | None = None) -> bool:
    """Whether one device's output block (a host array, or an object indexable by an index array) is what the
    collective over its group's inputs gives, at CHECK_ELEMENTS indices spread over it."""
    length = len(block)
    at = np.unique(np.linspace(0, length - 1, min(length, CHECK_ELEMENTS)).astype(np.int64)) if length else np.zeros(0, np.int64)
    got = np.asarray(block[at]).astype(np.float64)
    return bool(np.array_equal(got, expected(np, collective, position, values, length, at, pair).astype(np.float64)))


def output_is_right(np, layout: Layout, axis: str, collective: str, out, pair: tuple[int, int] | None = None) -> bool:
    """Every output block this process holds checked against its group's inputs (block_is_right)."""
    where = {d: (i, [block_value(j) for j in range(len(group))]) for group in axis_groups(layout, np, axis) for i, d in enumerate(group)}
    for shard in out.addressable_shards:
        position, values = where[shard.device]
        if not block_is_right(np, collective, position, values, shard.data.reshape(-1), pair):
            return False
    return True
