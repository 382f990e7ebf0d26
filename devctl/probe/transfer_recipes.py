"""How `devctl bench transfer` moves the bytes of each cell: one recipe per direction, variant and layout,
each an untimed `prepare` per repetition and a timed `op`, in the ways a JAX program moves data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from devctl.probe.transfer_measure import HostBuffers, overlaps, ranges
from devctl.probe.transfer_plan import Spec


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
        if spec.variant == "pageable":
            src = host.pattern
            return Transfer(lambda _: jax.device_put(src, dev).block_until_ready(), sources=lambda _: ranges(src))
        if spec.variant == "aligned":
            src = host.aligned()
            return Transfer(lambda _: jax.device_put(src, dev).block_until_ready(), sources=lambda _: ranges(src))
        from jax.sharding import SingleDeviceSharding

        pinned = jax.device_put(host.pattern, SingleDeviceSharding(dev, memory_kind="pinned_host"))
        pinned.block_until_ready()
        to_device = SingleDeviceSharding(dev, memory_kind="device")
        return Transfer(
            lambda _: jax.device_put(pinned, to_device).block_until_ready(), sources=lambda _: ranges(pinned)
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

        return Transfer(op, prepare=fresh, sources=ranges)

    def _t_d2d(self, spec: Spec, host: HostBuffers) -> Transfer:
        jax = self.jax
        master = self._on_device(host.pattern, spec.src)
        if spec.variant == "put":
            return Transfer(
                lambda _: jax.device_put(master, spec.dst).block_until_ready(), sources=lambda _: ranges(master)
            )
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
            return Transfer(
                lambda _: jax.device_put(master, dev, may_alias=False).block_until_ready(),
                sources=lambda _: ranges(master),
            )
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
            return Transfer(
                lambda _: jax.device_put(src_host, target).block_until_ready(),
                sources=lambda _: ranges(src_host),
            )
        if spec.direction == "d2d" and spec.layout == "replicated":
            # One array on the first device, broadcast to all: the copy that stays home may alias (and is not counted).
            master = self._on_device(src_host, spec.src)
            return Transfer(
                lambda _: jax.device_put(master, target).block_until_ready(),
                sources=lambda _: ranges(master),
            )
        master = jax.device_put(src_host, target, may_alias=False).block_until_ready()
        master = jax.device_put(master, target, may_alias=False).block_until_ready()  # never an alias of host memory
        if spec.direction == "d2h":
            fresh = lambda: jax.device_put(master, target, may_alias=False).block_until_ready()
            return Transfer(np.asarray, prepare=fresh, sources=ranges)
        if spec.direction == "d2d-self":
            return Transfer(
                lambda _: jax.device_put(master, target, may_alias=False).block_until_ready(),
                sources=lambda _: ranges(master),
            )
        # d2d on a mesh: the same layout on the devices rotated by one, so every device sends to its neighbour at once.
        rotated = NamedSharding(Mesh(np.array(devices[1:] + devices[:1]), ("x",)), part)
        return Transfer(
            lambda _: jax.device_put(master, rotated).block_until_ready(),
            sources=lambda _: ranges(master),
        )

    def _on_device(self, host_array, dev):
        """A device copy of host bytes that is sure not to alias them (CPU devices may alias aligned numpy)."""
        jax = self.jax
        a = jax.device_put(host_array, dev, may_alias=False).block_until_ready()
        if overlaps(ranges(a), ranges(host_array)):
            a = jax.device_put(a, dev, may_alias=False).block_until_ready()
        return a
