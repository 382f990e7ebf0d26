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


def make_input(jax, layout: Layout, local_elements: int, dtype: str):
    """The sharded input, created on the devices themselves (no host copy; every process of a cluster makes its own
    shards the same way)."""
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    total = local_elements * math.prod(layout.shape)
    sharding = NamedSharding(layout.mesh, layout.spec())
    x = jax.jit(lambda: jnp.ones((total,), dtype=jnp.dtype(dtype)), out_shardings=sharding)()
    x.block_until_ready()
    return x
