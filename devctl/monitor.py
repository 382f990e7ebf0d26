"""Publish this JAX process's memory view so `devctl memstats` can show it from outside.

`Device.memory_stats()` and `jax.live_arrays()` answer only inside the process
that owns the devices. Call this from a training script:

    import devctl.monitor
    devctl.monitor.publish(interval=1.0)
    ...  # train as usual; `devctl memstats` now lists this job

A daemon thread writes `<pid>.json` (schema `devctl.publisher/1`) atomically
into a per-user directory (mode 0700; see devctl.discovery.publishers) every
interval, and removes it when the process exits. The document:

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

`import devctl.monitor` does not import jax; publish() and snapshot() do.
"""

from __future__ import annotations

import atexit
import heapq
import json
import math
import os
import socket
import sys
import threading
import time
import warnings
import weakref
from typing import Any

from devctl.discovery.publishers import ensure_directory, resolve_directory, snapshot_path, temp_path
from devctl.model.publishers import SCHEMA

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
        self._written: str | None = None  # the file this publisher last wrote
        self._cache = _ArrayCache()
        self.snapshots_written = 0

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
        return f"<devctl.monitor.Publisher {state} interval={self._interval}s path={self.path!r}>"

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
                f"devctl.monitor: not publishing snapshots to {self._directory}: {problem}",
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
            now = time.monotonic()
            if self._wake.is_set():
                self._wake.clear()
                next_t = now  # interval changed (or stopping): re-time from now
            # Fixed cadence; after a stall skip the missed ticks instead of bursting.
            next_t = max(next_t + self._interval, now)
            self._wake.wait(next_t - now)

    def _tick(self) -> None:
        problem = ensure_directory(self._directory)
        if problem:
            self._warn(problem)
            return
        error, self._pending_error = self._pending_error, None
        doc = build_snapshot(
            interval_s=self._interval, top_k=self._top_k, initialize=False, cache=self._cache, error=error
        )
        if self._stopping:
            return  # stop() may already have removed the file: do not bring it back
        try:
            _write_atomic(self._directory, self._pid, _encode(doc))
        except OSError as e:
            self._pending_error = f"writing the snapshot failed: {_describe(e)}"
            return
        self._written = snapshot_path(self._directory, self._pid)
        self.snapshots_written += 1

    def _remove_file(self) -> None:
        for path in {self._written, snapshot_path(self._directory, self._pid)}:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self._written = None


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


class _Single:
    """A single-device array: its device and size."""

    __slots__ = ("dev", "nbytes", "meta")

    def __init__(self, x: Any) -> None:
        self.meta = _meta(x)
        self.dev = _device_id(x)
        self.nbytes = self.meta[2]


class _Parent:
    """A multi-device array, from its sharding alone; shard objects only when needed (`shards`)."""

    __slots__ = ("meta", "devs", "shard_bytes", "shard_sig", "shards", "shard_ids")

    def __init__(self, x: Any) -> None:
        self.meta = _meta(x)
        sharding = x.sharding
        self.devs = tuple(sorted(d.id for d in sharding.addressable_devices))
        shard_shape = tuple(sharding.shard_shape(x.shape))  # raises for uneven shards: see _facts
        self.shard_bytes = math.prod(shard_shape) * x.dtype.itemsize
        self.shard_sig = (shard_shape, self.meta[1])
        # The per-shard arrays' facts once materialized, else None.
        self.shards: tuple[_Single, ...] | None = None
        self.shard_ids: tuple[int, ...] = ()

    def materialize(self, x: Any) -> None:
        # Creates the per-shard array objects, exactly as any host fetch of a
        # sharded array does; they alias the parent's buffers.
        objs = tuple(x._arrays)
        self.shard_ids = tuple(id(s) for s in objs)
        self.shards = tuple(_Single(s) for s in objs)


class _ArrayCache:
    """Per-array facts from the previous snapshot, for arrays that outlive a tick (frozen weights, data).

    Keyed by id(); a weak reference confirms the id still names the same
    array (ids are reused after an array dies). Arrays are immutable, so
    their shards, devices and sizes never change.
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref, Any]] = {}

    def lookup(self, x: Any) -> tuple[weakref.ref, Any] | None:
        hit = self.entries.get(id(x))
        if hit is not None and hit[0]() is x:
            return hit
        return None


def _live_usage(arrays: list, cache: _ArrayCache) -> _Usage:
    """Bytes and array counts per device, each shard counted once.

    A multi-device array is measured from its sharding, without touching its
    shards: asking for them (`_arrays`, and anything built on it such as
    unsafe_buffer_pointer) creates one Python array per shard, which then
    shows up in jax.live_arrays(). Those per-shard arrays exist anyway once
    anything fetched the array to the host, and jax.live_arrays() lists them
    beside their parent. So when every device of a parent holds a
    single-device array shaped like its shard, the parent's shards are
    fetched (already there: nothing new is created) and skipped by identity.

    Not caught: two single-device array objects over one buffer (what
    jax.device_put to the device an array is already on returns) count
    twice; telling them apart needs buffer pointers, and asking for a
    pointer creates an array object.
    """
    fresh: dict[int, tuple[weakref.ref, Any]] = {}
    singles: list[tuple[int, _Single]] = []
    parents: list[tuple[Any, _Parent]] = []
    try:
        single_cls = _single_device_sharding_cls()
        for x in arrays:
            try:
                entry = cache.lookup(x) or (weakref.ref(x), _facts(x, single_cls))
            except Exception:  # noqa: BLE001 - deleted (donated) mid-scan, or an exotic array type
                continue
            fresh[id(x)] = entry
            facts = entry[1]
            if isinstance(facts, _Single):
                singles.append((id(x), facts))
            else:
                parents.append((x, facts))
        arrays.clear()
        _materialize_suspected_parents(parents, singles)
        parent_facts = [p for _, p in parents]
    finally:
        # While this frame holds arrays the program has dropped, their device
        # memory cannot be freed.
        arrays.clear()
        parents = []  # noqa: F841
        x = None  # noqa: F841
    cache.entries = fresh  # drops the facts of arrays that died since the last snapshot
    return _account_all(parent_facts, singles)


def _facts(x: Any, single_cls: type | None) -> _Single | _Parent:
    if single_cls is not None and type(x.sharding) is single_cls:
        return _Single(x)
    try:
        return _Parent(x)
    except Exception:  # noqa: BLE001 - uneven or exotic sharding: measure the shards themselves
        parent = object.__new__(_Parent)
        parent.meta = _meta(x)
        parent.materialize(x)
        parent.devs = tuple(sorted({s.dev for s in parent.shards}))
        parent.shard_bytes, parent.shard_sig = 0, None
        return parent


def _materialize_suspected_parents(parents: list[tuple[Any, _Parent]], singles: list[tuple[int, _Single]]) -> None:
    if not parents or not singles:
        return
    looks = {(s.dev, s.meta[0], s.meta[1]) for _, s in singles}
    for x, p in parents:
        if p.shards is None and all((d, *p.shard_sig) in looks for d in p.devs):
            try:
                p.materialize(x)
            except Exception:  # noqa: BLE001 - deleted since the scan: measured from its sharding
                pass


def _account_all(parents: list[_Parent], singles: list[tuple[int, _Single]]) -> _Usage:
    usage = _Usage()
    shard_ids: set[int] = set()
    per_bytes: dict[int, int] = {}
    per_count: dict[int, int] = {}
    for p in parents:
        if p.shards is None:
            shards = [(d, p.shard_bytes) for d in p.devs]
        else:
            shard_ids.update(p.shard_ids)
            shards = [(s.dev, s.nbytes) for s in p.shards]
        _account(usage, p.meta, shards, per_bytes, per_count)
    for ident, s in singles:
        if ident not in shard_ids:  # else a shard of a parent counted above
            _account(usage, s.meta, ((s.dev, s.nbytes),), per_bytes, per_count)
    usage.per_device = {d: (per_bytes[d], per_count.get(d, 0)) for d in per_bytes}
    return usage


def _account(usage: _Usage, meta: tuple, shards, per_bytes: dict, per_count: dict) -> None:
    local = 0
    devs: set[int] = set()
    for dev, nbytes in shards:
        per_bytes[dev] = per_bytes.get(dev, 0) + nbytes
        if dev not in devs:
            devs.add(dev)
            per_count[dev] = per_count.get(dev, 0) + 1
        local += nbytes
    if devs:
        usage.arrays.append((local, meta, tuple(sorted(devs))))


def _meta(x: Any) -> tuple[tuple[int, ...], str, int]:
    """(shape, dtype name, logical bytes of the whole array)."""
    aval = x.aval
    shape = tuple(int(n) for n in aval.shape)
    dtype = aval.dtype
    return shape, str(dtype), math.prod(shape) * dtype.itemsize


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
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


def _write_atomic(directory: str, pid: int, data: bytes) -> None:
    """Readers see the old snapshot or the new one, never half of one."""
    tmp = temp_path(directory, pid)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    # No fsync: the directory is tmpfs in the usual case, and a snapshot lost
    # to a power cut describes a process that is gone anyway.
    os.replace(tmp, snapshot_path(directory, pid))


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
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be a non-negative integer, got {top_k!r}")
    return top_k


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
