"""Publish this JAX process's memory view so `devctl memstats` can show it from outside.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices. Call this from a training script:

    from devctl.publish import publish
    publish(interval=1.0)
    ...  # train as usual; `devctl memstats` now lists this job

(`devctl.monitor.publish`, the name earlier releases documented, is the same function.)

A daemon thread writes `<pid>.json` (schema `devctl.publisher/1`) atomically
into a per-user directory (mode 0700; see devctl.discovery.publishers) every
interval, and removes it when the process exits. A directory that is a
symbolic link, not ours or open to others is refused (a warning, nothing
written); a file of that name that devctl did not write is never replaced, and
only the file this publisher wrote is ever removed. The document:

    {
      "schema": "devctl.publisher/1",
      "pid": 1234, "process_create_time": 1700000000.12,
      "command": ["python", "train.py", "--lr", "3e-4"],  # sys.orig_argv: the full command line
      "hostname": "node-1",
      "timestamp": 1700000123.45,         # unix seconds
      "interval_s": 1.0,                  # null for a one-off snapshot()
      "jax_version": "0.10.2", "jaxlib_version": "0.10.2",
      "backend_initialized": true,        # false: JAX not started yet, devices is []
      "devices": [
        {"id": 0, "platform": "gpu", "device_kind": "NVIDIA H100 80GB HBM3", "process_index": 0,
         "live_bytes": 123456,            # bytes (shape x itemsize) of live array shards here, replicas on each device
         "live_arrays": 17,               # arrays with a shard here (one array counts once per device)
         "memory_stats": {"bytes_in_use": 1, "bytes_limit": 2, "...": null},  # -1 -> null; null on CPU
         "memory_stats_error": null}
      ],
      "largest_arrays": [
        {"shape": [4096, 4096], "dtype": "float32", "nbytes": 67108864,  # the whole array
         "local_bytes": 67108864,         # what this process holds of it, replicas included
         "devices": [0, 1, 2, 3]}
      ],
      "snapshot_s": 0.0004,               # wall time the publisher spent building this snapshot
      "error": null                       # what failed since the last snapshot, if anything
    }

`import devctl.publish` does not import jax; publish() and snapshot() do.
"""

from __future__ import annotations

import atexit
import heapq
import json
import math
import os
import socket
import stat
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from devctl.discovery.publishers import (
    MAX_ARRAYS,
    MAX_FILE_BYTES,
    SNAPSHOT_PREFIX,
    ensure_directory,
    resolve_directory,
    snapshot_path,
)
from devctl.model.publishers import SCHEMA
from devctl.safefs import read_regular, write_atomic

__all__ = ["Publisher", "publish", "snapshot", "stop", "current"]

THREAD_NAME = "devctl-monitor"
_STOP_JOIN_S = 5.0

_lock = threading.Lock()
_publisher: Publisher | None = None
_atexit_registered = False


# --- public API -------------------------------------------------------------


def publish(interval: float = 1.0, *, directory: str | None = None, top_k: int = 10) -> Publisher:
    """Start publishing snapshots every `interval` seconds from one daemon thread; return the publisher.

    Calling it again is harmless: the running publisher is returned, with its
    interval, top_k and directory updated to the new arguments. If the
    directory is not private to this user, a warning is issued once and
    nothing is written (the thread keeps checking, so fixing the mode works).
    """
    interval = _check_interval(interval)
    top_k = _check_top_k(top_k)
    path = resolve_directory(directory)
    # Import JAX here, in the caller's thread: the publisher thread then never
    # races the program's own first import.
    import jax  # noqa: F401

    global _publisher
    with _lock:
        pub = _publisher
        if pub is not None and pub.running:
            pub._update(interval=interval, top_k=top_k, directory=path)
            return pub
        pub = Publisher(interval=interval, directory=path, top_k=top_k)
        pub._check_directory_now(stacklevel=3)
        _register_process_hooks()
        pub._start()
        _publisher = pub
        return pub


def stop() -> None:
    """Stop the running publisher, if any, and remove its snapshot file."""
    global _publisher
    with _lock:
        pub, _publisher = _publisher, None
    if pub is not None:
        pub.stop()


def current() -> Publisher | None:
    """The running publisher of this process, or None."""
    pub = _publisher
    return pub if pub is not None and pub.running else None


def snapshot(top_k: int = 10) -> dict[str, Any]:
    """This process's view now, as the publisher would write it (handy in a notebook).

    Unlike the publisher thread, this initializes JAX's backends if the
    program has not yet: the caller asked for devices.
    """
    top_k = _check_top_k(top_k)
    pub = current()
    return build_snapshot(
        interval_s=pub.interval if pub else None,
        top_k=top_k,
        initialize=True,
        cache=None,
    )


class Publisher:
    """The publishing thread of this process. Create it with publish(), not directly."""

    def __init__(self, *, interval: float, directory: str, top_k: int) -> None:
        self._interval = interval
        self._directory = directory
        self._top_k = top_k
        self._pid = os.getpid()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._pending_error: str | None = None
        self._warned = False
        # (path, st_dev, st_ino) of the file this publisher last wrote: the only file it ever removes.
        self._written: tuple[str, int, int] | None = None
        self._cache = _ArrayCache()
        self.snapshots_written = 0
        self._ticks = 0  # loop turns, written or not: lets a test wait for turns instead of sleeping

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def path(self) -> str:
        """Where this process's snapshot lives."""
        return snapshot_path(self._directory, self._pid)

    @property
    def top_k(self) -> int:
        return self._top_k

    @property
    def running(self) -> bool:
        t = self._thread
        return t is not None and t.is_alive() and not self._stopping and self._pid == os.getpid()

    def stop(self, timeout: float = _STOP_JOIN_S) -> None:
        """Stop the thread and remove the snapshot file. Safe to call twice."""
        global _publisher
        self._stopping = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread() and t.is_alive():
            t.join(timeout)
        if self._pid == os.getpid():
            self._remove_file()
        with _lock:
            if _publisher is self:
                _publisher = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<devctl.publish.Publisher {state} interval={self._interval}s path={self.path!r}>"

    # --- internals ----------------------------------------------------------

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self._thread.start()

    def _update(self, *, interval: float, top_k: int, directory: str) -> None:
        self._top_k = top_k
        if directory != self._directory:
            self._remove_file()
            self._directory = directory
            self._warned = False
            self._check_directory_now(stacklevel=4)
        if interval != self._interval:
            self._interval = interval
            self._wake.set()  # start the new cadence now rather than after the old interval

    def _check_directory_now(self, *, stacklevel: int) -> None:
        problem = ensure_directory(self._directory)
        if problem:
            self._warn(problem, stacklevel=stacklevel + 1)

    def _warn(self, problem: str, *, stacklevel: int = 2) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"devctl.publish: not publishing snapshots to {self._directory}: {problem}",
                RuntimeWarning,
                stacklevel=stacklevel,
            )

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stopping:
            try:
                self._tick()
            except BaseException as e:  # noqa: BLE001 - the publisher must never take the program down
                self._pending_error = _describe(e)
            self._ticks += 1
            now = time.monotonic()
            if self._wake.is_set():
                self._wake.clear()
                next_t = now  # interval changed (or stopping): re-time from now
            # Fixed cadence; after a stall skip the missed ticks instead of bursting.
            next_t = max(next_t + self._interval, now)
            self._wake.wait(next_t - now)

    def _tick(self) -> None:
        directory = self._directory
        problem = ensure_directory(directory)
        if problem:
            self._warn(problem)
            return
        error, self._pending_error = self._pending_error, None
        doc = build_snapshot(
            interval_s=self._interval, top_k=self._top_k, initialize=False, cache=self._cache, error=error
        )
        if self._stopping:
            return  # stop() may already have removed the file: do not bring it back
        path = snapshot_path(directory, self._pid)
        if foreign := _foreign_file(path, self._written):
            self._warn(foreign)
            return
        try:
            # A new file renamed over the old: readers never see half a snapshot, and a link or FIFO
            # put at the name is replaced (or refused), never written through.
            write_atomic(path, _encode(doc), mode=0o600, sync=False)  # rewritten every interval; tmpfs as a rule
            st = os.lstat(path)
        except OSError as e:
            self._pending_error = f"writing the snapshot failed: {_describe(e)}"
            return
        written = (path, st.st_dev, st.st_ino)
        if directory != self._directory:
            _unlink_own(written)  # publish() moved us to another directory while we wrote
            return
        self._written = written
        self.snapshots_written += 1

    def _remove_file(self) -> None:
        written, self._written = self._written, None
        if written is not None:
            _unlink_own(written)


def _foreign_file(path: str, written: tuple[str, int, int] | None) -> str | None:
    """Why the file at `path` must not be replaced (it is not a devctl snapshot), or None.
    One lstat a tick while the name still holds the file this publisher wrote last."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot check {os.path.basename(path)}: {e.strerror or e}"
    if written is not None and written == (path, st.st_dev, st.st_ino):
        return None
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        try:
            # A snapshot an earlier process with this pid left behind is ours to replace.
            if read_regular(path, MAX_FILE_BYTES).startswith(SNAPSHOT_PREFIX):
                return None
        except OSError:  # a link, a FIFO, larger than any snapshot: not ours
            pass
    return f"{os.path.basename(path)} is there and is not a devctl snapshot; it is left as it is"


def _unlink_own(written: tuple[str, int, int]) -> None:
    """Remove the file this publisher wrote, if it is still that file (same inode): never another."""
    path, dev, ino = written
    try:
        st = os.lstat(path)
        if (st.st_dev, st.st_ino) == (dev, ino) and stat.S_ISREG(st.st_mode):
            os.unlink(path)
    except OSError:
        pass


# --- building a snapshot ----------------------------------------------------


def build_snapshot(
    *,
    interval_s: float | None,
    top_k: int,
    initialize: bool,
    cache: _ArrayCache | None,
    error: str | None = None,
) -> dict[str, Any]:
    """The `devctl.publisher/1` document for this process now. Never raises for JAX failures."""
    t0 = time.perf_counter()
    doc = _header(interval_s)
    errors = [error] if error else []
    try:
        if initialize or _backends_initialized():
            devices, largest = _device_view(top_k, cache)
            doc["devices"], doc["largest_arrays"] = devices, largest
        else:
            # Initializing backends from here would run before the program's
            # own jax.distributed.initialize() or platform choice, and break it.
            doc["backend_initialized"] = False
    except Exception as e:  # noqa: BLE001 - report, never raise into the user's program
        errors.append(f"reading devices failed: {_describe(e)}")
    doc["snapshot_s"] = round(time.perf_counter() - t0, 6)
    doc["error"] = "; ".join(errors) if errors else None
    return doc


def _header(interval_s: float | None) -> dict[str, Any]:
    ident = _identity()
    return {
        "schema": SCHEMA,
        "pid": os.getpid(),
        "process_create_time": ident["process_create_time"],
        "command": ident["command"],
        "hostname": ident["hostname"],
        "timestamp": time.time(),
        "interval_s": interval_s,
        "jax_version": ident["jax_version"],
        "jaxlib_version": ident["jaxlib_version"],
        "backend_initialized": True,
        "devices": [],
        "largest_arrays": [],
    }


_IDENTITY: dict[str, Any] | None = None
_IDENTITY_PID: int | None = None


def _identity() -> dict[str, Any]:
    """What does not change during the process's life, computed once (again after a fork)."""
    global _IDENTITY, _IDENTITY_PID
    pid = os.getpid()
    if _IDENTITY is None or _IDENTITY_PID != pid:
        _IDENTITY = {
            "process_create_time": _create_time(),
            # orig_argv keeps the interpreter and its flags (`python -m pkg`), which argv drops.
            "command": list(getattr(sys, "orig_argv", None) or sys.argv),
            "hostname": socket.gethostname(),
            "jax_version": _version("jax"),
            "jaxlib_version": _version("jaxlib"),
        }
        _IDENTITY_PID = pid
    return _IDENTITY


def _create_time() -> float | None:
    try:
        import psutil

        return psutil.Process().create_time()
    except Exception:  # noqa: BLE001
        return None


def _version(module: str) -> str | None:
    try:
        if module == "jaxlib":
            import jaxlib.version

            return jaxlib.version.__version__
        import jax

        return jax.__version__
    except Exception:  # noqa: BLE001
        return None


def _backends_initialized() -> bool:
    try:
        from jax._src import xla_bridge
    except Exception:  # noqa: BLE001
        return True
    check = getattr(xla_bridge, "backends_are_initialized", None)
    if check is not None:
        return bool(check())
    return bool(getattr(xla_bridge, "_backends", True))


def _device_view(top_k: int, cache: _ArrayCache | None) -> tuple[list[dict], list[dict]]:
    import jax

    devices = jax.local_devices()
    usage = _live_usage(jax.live_arrays(), cache if cache is not None else _ArrayCache())
    # memory_stats() after the scan: by then this thread holds no array references.
    out = []
    for d in devices:
        stats, stats_error = _memory_stats(d)
        live_bytes, live_count = usage.per_device.get(d.id, (0, 0))
        out.append(
            {
                "id": d.id,
                "platform": d.platform,
                "device_kind": d.device_kind,
                "process_index": d.process_index,
                "live_bytes": live_bytes,
                "live_arrays": live_count,
                "memory_stats": stats,
                "memory_stats_error": stats_error,
            }
        )
    return out, _largest(usage.arrays, top_k)


def _memory_stats(device: Any) -> tuple[dict[str, int | None] | None, str | None]:
    try:
        raw = device.memory_stats()
    except Exception as e:  # noqa: BLE001 - some plugins raise instead of returning None
        return None, _describe(e)
    if raw is None:
        return None, None
    # -1 is how PJRT C-API plugins say "not set".
    return {str(k): (None if not isinstance(v, int) or v < 0 else int(v)) for k, v in raw.items()}, None


# --- live arrays ------------------------------------------------------------


class _Usage:
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

    def fetch_buffers(self, x: Any) -> None:
        # A shard object is its own `_arrays[0]`: asking it for its pointer creates nothing more.
        self.shard_buffers = frozenset((_device_id(o), p) for o in x._arrays if (p := _pointer(o)) is not None)

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


class _ArrayCache:
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


def _live_usage(arrays: list, cache: _ArrayCache) -> _Usage:
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


def _count(parents: list[tuple[Any, _Parent]], singles: list[tuple[Any, tuple, tuple]]) -> _Usage:
    """Per-device totals; see _live_usage for how aliases are found."""
    usage = _Usage()
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
                    if p.shard_buffers is None:
                        p.fetch_buffers(x)
                    buffers |= p.shard_buffers
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


def _account(usage: _Usage, meta: tuple, shards, buffers: set, per_bytes: dict, per_count: dict) -> None:
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


def _largest(arrays: list[tuple[int, tuple, tuple[int, ...]]], top_k: int) -> list[dict]:
    return [
        {"shape": list(shape), "dtype": dtype, "nbytes": nbytes, "local_bytes": local, "devices": list(devs)}
        for local, (shape, dtype, nbytes), devs in heapq.nlargest(top_k, arrays, key=lambda t: t[0])
    ]


# --- writing ----------------------------------------------------------------


def _encode(doc: dict[str, Any]) -> bytes:
    # Starts with SNAPSHOT_PREFIX ("schema" is the first key): how the reader knows a left-over temp file as ours.
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


# --- process life -------------------------------------------------------------


def _register_process_hooks() -> None:
    global _atexit_registered
    if _atexit_registered:
        return
    _atexit_registered = True
    # Registered after `import jax`, so it runs before JAX's own exit handlers
    # tear the backends down under a thread that may be reading them.
    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def _at_exit() -> None:
    pub = _publisher
    if pub is not None and pub._pid == os.getpid():
        pub.stop()


def _after_fork_in_child() -> None:
    # The thread did not survive the fork and the file belongs to the parent;
    # the child may call publish() for itself.
    global _publisher, _lock
    _publisher = None
    _lock = threading.Lock()


# --- argument checks ----------------------------------------------------------


def _check_interval(interval: float) -> float:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not math.isfinite(interval) or interval <= 0:
        raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
    return float(interval)


def _check_top_k(top_k: int) -> int:
    # The reader refuses snapshots listing more arrays than MAX_ARRAYS.
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 0 <= top_k <= MAX_ARRAYS:
        raise ValueError(f"top_k must be a whole number from 0 to {MAX_ARRAYS}, got {top_k!r}")
    return top_k


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
