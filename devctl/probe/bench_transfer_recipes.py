"""How `devctl bench transfer` moves the bytes of each cell: one recipe per direction, variant and layout,
each an untimed `prepare` per repetition and a timed `op`, in the ways a JAX program moves data; and, where a
repetition needs no fresh input, a `burst` call that starts one without waiting for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from devctl.probe.bench_transfer_buffers import HostBuffers, overlaps, ranges
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
        fresh = lambda: jax.device_put(master, spec.src, may_alias=False).block_until_ready()
        return Transfer(
            lambda a: jax.device_put(a, spec.dst, donate=True).block_until_ready(),
            prepare=fresh,
            sources=ranges,
            consumes_source=True,
        )

    def _t_d2d_self(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        dev = spec.src
        master = self._on_device(host.pattern, dev)
        # Without may_alias=False a same-device put returns its input: a no-op, not a copy (reference B.3).
        if spec.variant == "put":
            return _chained(master, lambda a: jax.device_put(a, dev, may_alias=False))
        fresh = lambda: jax.device_put(master, dev, may_alias=False).block_until_ready()
        return Transfer(
            lambda a: jax.device_put(a, dev, may_alias=False, donate=True).block_until_ready(),
            prepare=fresh,
            sources=ranges,
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
    last = [master]

    def start() -> Any:
        last[0] = copy(last[0])
        return last[0]

    return Transfer(lambda _: copy(master).block_until_ready(), sources=lambda _: ranges(master), burst=start)
