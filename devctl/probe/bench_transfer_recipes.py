"""How `devctl bench transfer` moves the bytes of each cell: one recipe per direction, variant and layout,
each an untimed `prepare` per repetition and a timed `op`, in the ways a JAX program moves data; and, where a
repetition needs no fresh input, a `burst` call that starts one without waiting for it; and the host buffers they
move, filled with a pattern, with the aliasing test that tells a copy from a zero-copy view."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from devctl.probe.bench import chained
from devctl.probe.bench_transfer_plan import Spec


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
    # Starts one repetition and returns its result without waiting (a burst waits on every result where the calls
    # copy one fixed source, _Independent; on the last where each copies the one before's, _chained; the bytes
    # moved are read from calls of `op` timed alone). None: each repetition needs a fresh input (a donated
    # source, a device array whose host copy JAX caches), and the cell is timed call by call.
    burst: Callable[[], Any] | None = None


class Recipes:
    """Mixed into the bench, which provides self.jax, self.np and self.opts."""

    jax: Any
    np: Any

    def _transfer(self, spec: Spec, host: HostBuffers) -> Transfer:
        if spec.layout != "single":
            return self._mesh_transfer(spec, host)
        return getattr(self, "_t_" + spec.direction.replace("-", "_"))(spec, host)

    def _t_h2d(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        dev = spec.dst
        if spec.variant in ("pageable", "aligned"):
            src = host.pattern if spec.variant == "pageable" else host.aligned()
            return _waited(lambda: jax.device_put(src, dev), src)
        from jax.sharding import SingleDeviceSharding

        pinned = jax.device_put(host.pattern, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        pinned.block_until_ready()
        to_device = SingleDeviceSharding(dev, memory_kind="device")
        return _waited(lambda: jax.device_put(pinned, to_device), pinned)

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

            # The copy into pinned_host memory is the transfer, from the same device array every time (JAX caches
            # the host copy of an array np.asarray has read, not of one device_put copies from), so it also runs in
            # bursts; timed alone, the pinned result is read as numpy, as a program does.
            to_pinned = SingleDeviceSharding(spec.src, memory_kind="pinned_host")
            start = lambda: jax.device_put(master, to_pinned, may_alias=False)
            return Transfer(lambda _: np.asarray(start().block_until_ready()), sources=lambda _: ranges(master), burst=_Independent(start))
        else:  # async

            def op(a):
                a.copy_to_host_async()
                return np.asarray(a)

        return Transfer(op, prepare=fresh, sources=ranges)

    def _t_d2d(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        master = self._on_device(host.pattern, spec.src)
        if spec.variant == "put":
            return _waited(lambda: jax.device_put(master, spec.dst), master)
        return _donated(jax, master, spec.src, spec.dst)

    def _t_d2d_self(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        dev = spec.src
        master = self._on_device(host.pattern, dev)
        # Without may_alias=False a same-device put returns its input: a no-op, not a copy (reference B.3).
        if spec.variant == "put":
            return _chained(master, lambda a: jax.device_put(a, dev, may_alias=False))
        return _donated(jax, master, dev, dev, may_alias=False)

    def _mesh_transfer(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax, np = self.jax, self.np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devices = list(spec.devices)
        part = PartitionSpec("x") if spec.layout == "sharded" else PartitionSpec()
        target = NamedSharding(Mesh(np.array(devices), ("x",)), part)
        src_host = host.pattern[: spec.size]
        if spec.direction == "h2d":
            return _waited(lambda: jax.device_put(src_host, target), src_host)
        if spec.direction == "d2d" and spec.layout == "replicated":
            # One array on the first device, broadcast to all: the copy that stays home may alias (and is not counted).
            master = self._on_device(src_host, spec.src)
            return _waited(lambda: jax.device_put(master, target), master)
        master = jax.device_put(src_host, target, may_alias=False).block_until_ready()
        master = jax.device_put(master, target, may_alias=False).block_until_ready()  # never an alias of host memory
        if spec.direction == "d2h":
            fresh = lambda: jax.device_put(master, target, may_alias=False).block_until_ready()
            return Transfer(np.asarray, prepare=fresh, sources=ranges)
        if spec.direction == "d2d-self":
            return _chained(master, lambda a: jax.device_put(a, target, may_alias=False))
        # d2d on a mesh: the same layout on the devices rotated by one, so every device sends to its neighbour at once.
        rotated = NamedSharding(Mesh(np.array(devices[1:] + devices[:1]), ("x",)), part)
        return _waited(lambda: jax.device_put(master, rotated), master)

    def _on_device(self, host_array, dev):
        """A device copy of host bytes that is sure not to alias them (CPU devices may alias aligned numpy)."""
        jax = self.jax
        a = jax.device_put(host_array, dev, may_alias=False).block_until_ready()
        if overlaps(ranges(a), ranges(host_array)):
            a = jax.device_put(a, dev, may_alias=False).block_until_ready()
        return a


def _donated(jax, master: Any, home: Any, dst: Any, **put: Any) -> Transfer:
    """A fresh copy of `master` on `home` each repetition (untimed), donated to the put: gone after it."""
    fresh = lambda: jax.device_put(master, home, may_alias=False).block_until_ready()
    return Transfer(lambda a: jax.device_put(a, dst, donate=True, **put).block_until_ready(), prepare=fresh, sources=ranges, consumes_source=True)


def _waited(start: Callable[[], Any], source: Any) -> Transfer:
    """A transfer from one fixed `source`: timed alone it waits for its result; in a burst, for every result."""
    return Transfer(lambda _: start().block_until_ready(), sources=lambda _: ranges(source), burst=_Independent(start))


class _Independent:
    """A burst's call whose results do not wait on one another: the engine's burst waits on all of them
    (devctl.probe.bench.burst), holding them meanwhile (within the cell's burst limit)."""

    independent = True

    def __init__(self, start: Callable[[], Any]):
        self._start = start

    def __call__(self) -> Any:
        return self._start()


def _chained(master: Any, copy: Callable[[Any], Any]) -> Transfer:
    """Copies of `master` on its own devices. Timed alone, each copies `master`; in a burst, each copies the result
    of the one before, so a copy cannot start before the one before it has finished, however many streams the
    backend copies on."""
    return Transfer(lambda _: copy(master).block_until_ready(), sources=lambda _: ranges(master), burst=chained(master, copy))


# ---- host buffers filled with a pattern, and the aliasing test that tells a copy from a zero-copy view ----------

# A prime period, so a shard or page landing at the wrong offset never matches the expected bytes by accident.
PATTERN_PERIOD = 65521


class HostBuffers:
    """The host side of one size: a pattern-filled source placed like a numpy array, and a warm memcpy target."""

    def __init__(self, np, size: int):
        self.np, self.size = np, size
        # numpy's large arrays start 16 bytes into a page (malloc's header); XLA's CPU client aliases
        # 64-byte-aligned ones instead of copying. Placing the source at 16 mod 64 makes every size
        # behave like an ordinary numpy array, not alias at random when malloc happens to align it.
        self.pattern = placed(np, size, align=64, offset=16)
        fill_pattern(np, self.pattern)
        # Placed as the pattern is, so memcpy meets both at the same alignment (its fastest case).
        self.memcpy_dst = placed(np, size, align=64, offset=16)
        self.memcpy_dst.fill(0)  # touch every page now, not inside the timing
        self._aligned = None

    def aligned(self):
        if self._aligned is None:
            self._aligned = placed(self.np, self.size, align=4096, offset=0)
            self.np.copyto(self._aligned, self.pattern)
        return self._aligned


def placed(np, size: int, *, align: int, offset: int):
    raw = np.empty(size + 2 * align, dtype=np.uint8)
    start = (offset - raw.ctypes.data) % align
    return raw[start : start + size]


def fill_pattern(np, buf) -> None:
    block = ((np.arange(PATTERN_PERIOD, dtype=np.uint64) * 2654435761) >> 13).astype(np.uint8)
    whole = buf.shape[0] // PATTERN_PERIOD
    if whole:
        buf[: whole * PATTERN_PERIOD].reshape(whole, PATTERN_PERIOD)[:] = block
    tail = buf.shape[0] - whole * PATTERN_PERIOD
    buf[whole * PATTERN_PERIOD :] = block[:tail]


def ranges(obj) -> list[tuple[int, int]]:
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


def overlaps(a: list, b: list) -> bool:
    return any(p < q + nq and q < p + np_ for p, np_ in a for q, nq in b)


def moved_bytes(result: list, sources: list) -> int:
    """Bytes of the result that are not the source's own memory."""
    return sum(n for p, n in result if not overlaps([(p, n)], sources))
