"""How many bytes of live arrays each local device holds, with every device buffer counted once, for the publisher's snapshot.

Reads jax.live_arrays() without creating array objects (asking an array for
its shards or buffer pointer creates objects that live_arrays() then lists)
and without keeping any array alive past the scan. Facts about multi-device
arrays are cached between snapshots (ArrayCache), so a snapshot of a training
job that keeps its arrays costs little. jax is imported inside functions only.
"""

from __future__ import annotations

import heapq
import math
import weakref
from typing import Any


class Usage:
    """Per-device (live bytes, live arrays), and the arrays' facts for the largest-arrays list."""

    def __init__(self) -> None:
        self.per_device: dict[int, tuple[int, int]] = {}
        # (local bytes, (shape, dtype, nbytes), device ids): facts only, no
        # array references, so nothing here keeps device memory alive.
        self.arrays: list[tuple[int, tuple, tuple[int, ...]]] = []


class _Parent:
    """A multi-device array, measured from its sharding; its shard objects only when aliases are suspected."""

    __slots__ = ("meta", "devs", "shard_bytes", "keys", "shard_ids", "shard_buffers", "uneven")

    def __init__(self, x: Any) -> None:
        self.meta = _meta(x)
        sharding = x.sharding
        key = (sharding, self.meta[0], self.meta[1])
        layout = _LAYOUTS.get(key)
        if layout is None:
            layout = _layout(sharding, self.meta)
            if len(_LAYOUTS) >= _LAYOUTS_MAX:
                _LAYOUTS.clear()
            _LAYOUTS[key] = layout
        self.devs, self.shard_bytes, self.keys = layout
        self.shard_ids: frozenset[int] | None = None  # ids of its shard objects, once materialized
        self.shard_buffers: frozenset[tuple[int, int]] | None = None  # (device, pointer), once fetched
        self.uneven: tuple[tuple[int, int], ...] | None = None  # (device, bytes) per shard, if uneven

    def materialize(self, x: Any) -> None:
        # `_arrays` creates the per-shard array objects unless a host fetch
        # already did (they alias the parent's buffers).
        self.shard_ids = frozenset(id(o) for o in x._arrays)

    def fetch_buffers(self, x: Any) -> frozenset[tuple[int, int]]:
        # A shard object is its own `_arrays[0]`: asking it for its pointer creates nothing more.
        self.shard_buffers = frozenset((_device_id(o), p) for o in x._arrays if (p := _pointer(o)) is not None)
        return self.shard_buffers

    @classmethod
    def from_shards(cls, x: Any) -> _Parent:
        """Uneven or exotic shardings: measure each shard object."""
        parent = object.__new__(cls)
        parent.meta = _meta(x)
        objs = x._arrays
        parent.uneven = tuple((_device_id(o), _meta(o)[2]) for o in objs)
        parent.devs = tuple(sorted({dev for dev, _ in parent.uneven}))
        parent.shard_bytes, parent.keys = 0, frozenset()
        parent.shard_ids = frozenset(id(o) for o in objs)
        parent.shard_buffers = None
        return parent


def _layout(sharding: Any, meta: tuple) -> tuple:
    shape, dtype, nbytes = meta
    devs = tuple(sorted(d.id for d in sharding.addressable_devices))
    # shard_shape raises for uneven shardings: _parent then falls back to _Parent.from_shards.
    shard_shape = tuple(int(n) for n in sharding.shard_shape(shape))
    shard_bytes = nbytes // math.prod(shape) * math.prod(shard_shape) if math.prod(shape) else 0
    # What a single-device array aliasing one of its shards looks like.
    keys = frozenset((d, shard_shape, dtype) for d in devs)
    return devs, shard_bytes, keys


class ArrayCache:
    """Facts about multi-device arrays from earlier snapshots, for those that outlive a tick.

    Keyed by id(); a weak reference confirms the id still names the same
    array (ids are reused after an array dies). Single-device arrays are not
    cached: their facts cost about what a cache entry does to allocate.
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref, _Parent]] = {}

    def parent(self, x: Any) -> tuple[weakref.ref, _Parent]:
        hit = self.entries.get(id(x))
        if hit is not None and hit[0]() is x:
            return hit
        return weakref.ref(x), _parent(x)


def live_usage(arrays: list, cache: ArrayCache) -> Usage:
    """Bytes and array counts per device, each device buffer counted once.

    Several array objects can share one buffer: once anything fetches a
    sharded array to the host (np.asarray, a checkpoint), jax.live_arrays()
    lists per-shard arrays beside their parent. The only buffer identity JAX
    exposes is unsafe_buffer_pointer(), and asking for it (or for a parent's
    shards) creates a Python array object that live_arrays() then lists too.
    So a multi-device array is measured from its sharding, and pointers are
    fetched only where aliasing is possible: a parent whose every device holds
    a single-device array shaped like its shard, and those single-device
    arrays. There, buffers are counted once by (device, pointer).

    Not caught: two single-device array objects over one buffer that no
    parent explains (jax.device_put to the device an array is already on,
    printing an array) count twice; they are rare and usually tiny, and
    checking every array would create an object per array.
    """
    fresh: dict[int, tuple[weakref.ref, _Parent]] = {}
    parents: list[tuple[Any, _Parent]] = []
    # (array, (device id, shape, dtype), (shape, dtype, nbytes)) of single-device arrays.
    singles: list[tuple[Any, tuple, tuple]] = []
    try:
        single_cls = _single_device_sharding_cls()
        single_objs = []
        for x in arrays:
            try:
                if type(x.sharding) is single_cls:
                    single_objs.append(x)
                else:
                    entry = cache.parent(x)
                    fresh[id(x)] = entry
                    parents.append((x, entry[1]))
            except Exception:  # noqa: BLE001 - deleted (donated) mid-scan, or an exotic array type
                continue
        arrays.clear()
        # Shard objects of parents already known to have them are counted
        # with their parent: skip them before paying for their facts.
        known = frozenset().union(*(p.shard_ids for _, p in parents if p.shard_ids))
        for x in single_objs:
            if id(x) in known:
                continue
            try:
                meta = _meta(x)
                singles.append((x, (_device_id(x), meta[0], meta[1]), meta))
            except Exception:  # noqa: BLE001 - deleted (donated) mid-scan
                continue
        single_objs.clear()
        usage = _count(parents, singles)
    finally:
        # While this frame holds arrays the program has dropped, their device
        # memory cannot be freed.
        arrays.clear()
        parents = singles = single_objs = []  # noqa: F841
        x = None  # noqa: F841
    cache.entries = fresh  # drops the facts of arrays that died since the last snapshot
    return usage


def _parent(x: Any) -> _Parent:
    try:
        return _Parent(x)
    except Exception:  # noqa: BLE001 - shard_shape raises for uneven shardings
        return _Parent.from_shards(x)


def _count(parents: list[tuple[Any, _Parent]], singles: list[tuple[Any, tuple, tuple]]) -> Usage:
    """Per-device totals; see live_usage for how aliases are found."""
    usage = Usage()
    per_bytes: dict[int, int] = {}
    per_count: dict[int, int] = {}

    # A parent whose every device holds a single-device array shaped like its
    # shard may have its shards among them: learn its shard objects' ids.
    shard_ids: set[int] = set()
    suspect: set[tuple] = set()
    if parents and singles:
        single_keys = {key for _, key, _ in singles}
        for x, p in parents:
            if p.shard_ids is None and p.keys and p.keys <= single_keys:
                try:
                    p.materialize(x)
                except Exception:  # noqa: BLE001 - deleted since the scan: measured from its sharding
                    pass
    for _, p in parents:
        if p.shard_ids is not None:
            shard_ids |= p.shard_ids
            suspect |= p.keys

    # Look-alikes that are not the shard objects themselves (a host fetch
    # makes a second set): only buffer pointers can tell whether they alias.
    buffers: set[tuple[int, int]] = set()
    extras: set[int] = set()
    extra_keys: set[tuple] = set()
    if suspect:
        for x, key, _ in singles:
            if key in suspect and id(x) not in shard_ids:
                extras.add(id(x))
                extra_keys.add(key)
    if extras:
        for x, p in parents:
            if p.shard_ids is not None and p.keys & extra_keys:
                try:
                    buffers |= p.shard_buffers if p.shard_buffers is not None else p.fetch_buffers(x)
                except Exception:  # noqa: BLE001 - deleted since the scan
                    pass

    # Parents are summed per device set first: one addition per array, not per array and device.
    by_devs: dict[tuple[int, ...], list[int]] = {}
    for _, p in parents:
        if not p.devs:
            continue  # no shard in this process (a global array of a multi-process job)
        if p.uneven is not None:
            _account(usage, p.meta, [(dev, None, n) for dev, n in p.uneven], buffers, per_bytes, per_count)
            continue
        acc = by_devs.get(p.devs)
        if acc is None:
            acc = by_devs[p.devs] = [0, 0]
        acc[0] += p.shard_bytes
        acc[1] += 1
        usage.arrays.append((p.shard_bytes * len(p.devs), p.meta, p.devs))
    for devs, (nbytes, count) in by_devs.items():
        for d in devs:
            per_bytes[d] = per_bytes.get(d, 0) + nbytes
            per_count[d] = per_count.get(d, 0) + count

    arrays = usage.arrays
    for x, key, meta in singles:
        if shard_ids:
            ident = id(x)
            if ident in shard_ids:
                continue  # a shard object of a parent counted above
            if ident in extras and (ptr := _pointer(x)) is not None and meta[2]:
                if (key[0], ptr) in buffers:
                    continue  # another object over a buffer already counted
                buffers.add((key[0], ptr))
        dev, nbytes = key[0], meta[2]
        per_bytes[dev] = per_bytes.get(dev, 0) + nbytes
        per_count[dev] = per_count.get(dev, 0) + 1
        arrays.append((nbytes, meta, (dev,)))
    usage.per_device = {d: (per_bytes[d], per_count.get(d, 0)) for d in per_bytes}
    return usage


def _account(usage: Usage, meta: tuple, shards, buffers: set, per_bytes: dict, per_count: dict) -> None:
    local = 0
    devs: set[int] = set()
    for dev, ptr, nbytes in shards:
        if ptr is not None and nbytes:
            if (dev, ptr) in buffers:
                continue  # another array object over a buffer already counted
            buffers.add((dev, ptr))
        per_bytes[dev] = per_bytes.get(dev, 0) + nbytes
        if dev not in devs:
            devs.add(dev)
            per_count[dev] = per_count.get(dev, 0) + 1
        local += nbytes
    if devs:
        usage.arrays.append((local, meta, tuple(sorted(devs))))


def _pointer(x: Any) -> int | None:
    try:
        return x.unsafe_buffer_pointer()
    except Exception:  # noqa: BLE001 - not every backend exposes pointers: counted, not deduplicated
        return None


def _meta(x: Any) -> tuple[tuple[int, ...], str, int]:
    """(shape, dtype name, logical bytes of the whole array)."""
    aval = x.aval
    shape = aval.shape
    dtype = aval.dtype
    known = _DTYPES.get(dtype)
    if known is None:
        # numpy's dtype.__str__ costs ~10 µs: once per dtype, not per array.
        known = _DTYPES[dtype] = (str(dtype), dtype.itemsize)
    return shape, known[0], math.prod(shape) * known[1]


_DTYPES: dict[Any, tuple[str, int]] = {}
# (sharding, shape, dtype name) -> (device ids, shard bytes, alias keys). Jitted
# steps hand back the same sharding objects every step, so this stays small.
_LAYOUTS: dict[tuple, tuple] = {}
_LAYOUTS_MAX = 4096


def _device_id(x: Any) -> int:
    sharding = x.sharding
    dev = getattr(sharding, "_device", None)  # SingleDeviceSharding's own field: cheaper than device_set
    if dev is None:
        dev = next(iter(sharding.device_set))
    return dev.id


def _single_device_sharding_cls() -> type | None:
    try:
        from jax.sharding import SingleDeviceSharding

        return SingleDeviceSharding
    except Exception:  # noqa: BLE001
        return None


def largest_arrays(arrays: list[tuple[int, tuple, tuple[int, ...]]], top_k: int) -> list[dict]:
    return [
        {"shape": list(shape), "dtype": dtype, "nbytes": nbytes, "local_bytes": local, "devices": list(devs)}
        for local, (shape, dtype, nbytes), devs in heapq.nlargest(top_k, arrays, key=lambda t: t[0])
    ]
