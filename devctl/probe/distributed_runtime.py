"""`jax.distributed.initialize`, bounded: JAX's join made to end on time, with named failures, and its service kept off the network.

JAX's own join waits longer than asked (its client retries past the
initialization timeout) and listens on every interface; the wrappers here
bound both, for devctl.probe.distributed_child. Runs in the child only:
the functions that touch JAX take its modules as arguments, so importing this
module imports no jax.
"""

from __future__ import annotations

import inspect
import ipaddress
import math
import os
import socket
import threading
import time
from typing import Any

# Joining is bounded by --timeout, counted from when the child starts to join (jax imported).
# The client keeps retrying registration this much longer than the service waits for
# every process, so the service's answer (which names the processes that never
# registered) arrives before the client gives up with a bare DEADLINE_EXCEEDED.
_CONNECT_MARGIN_S = 1
# ... and the child gives up this long after --timeout, whatever JAX is doing: 1 s for the
# service's answer above, 1 s to leave. So a join waits at most --timeout + 2 s (docs/cluster.md).
JOIN_GRACE_S = 2


def prefer_gloo(jax) -> None:
    """CPU devices of other processes are only visible with cross-process CPU collectives (gloo)."""
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
        return
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:  # an older jax without the option: CPU stays single-process, and the report says so
        pass


def join(jax, distributed, request: dict, timeout_s: float, deadline: float) -> None:
    """jax.distributed.initialize with the request's cluster, every wait of it bounded by `timeout_s`."""
    seconds = max(1, math.ceil(timeout_s))
    bound_joining(distributed, seconds, deadline)
    kwargs: dict[str, Any] = {
        "initialization_timeout": seconds + _CONNECT_MARGIN_S,
        # Heartbeats must never end the run before devctl's own, named, timeouts do.
        "heartbeat_timeout_seconds": 3 * seconds + 30,
        "shutdown_timeout_seconds": seconds,
    }
    explicit = None not in (request.get("coordinator"), request.get("num_processes"), request.get("process_id"))
    if explicit:
        kwargs["cluster_detection_method"] = "deactivate"  # all given: no metadata-server or scheduler lookups
    # Older jax (0.6, the newest for Python 3.10) has no heartbeat or shutdown timeouts: pass what this one takes.
    accepted = inspect.signature(jax.distributed.initialize).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    jax.distributed.initialize(request.get("coordinator"), request.get("num_processes"), request.get("process_id"), **kwargs)


def bound_joining(distributed, seconds: int, deadline: float) -> None:
    """Put BoundedRuntime between jax._src.distributed and jaxlib's runtime module."""
    # jax._src.distributed calls the runtime through `_jax` (jax 0.6 on) or `xla_extension` (before).
    for name in ("_jax", "xla_extension"):
        runtime = getattr(distributed, name, None)
        if runtime is not None and hasattr(runtime, "get_distributed_runtime_service"):
            setattr(distributed, name, BoundedRuntime(runtime, seconds, deadline, getattr(distributed, "global_state", None)))
            return


class BoundedRuntime:
    """jaxlib's runtime module, with JAX's two waits on joining made to end on time and early, and its service bound where asked.

    The service is told how long to wait for every process to register:
    jax.distributed.initialize leaves that to the service's default, which is
    longer than its clients wait, and the clients then die with a bare
    DEADLINE_EXCEEDED instead of the service's error naming who never came.

    The service listens on the coordinator's address, not on JAX's default
    `[::]:PORT` (every interface, IPv4 and IPv6): `--coordinator
    127.0.0.1:PORT` must not open the port to the network. The address is the
    one every process connects to (given, or auto-detected by JAX), so the
    others reach it as before, unless that name resolves to loopback on process
    0 itself (Debian's 127.0.1.1 for the host's own name): the join failure
    then says so. JAX_COORDINATOR_BIND_ADDRESS, where set, is the user's own
    choice and is left to JAX.

    The client is created only once the coordinator listens: a gRPC client
    that finds the port closed backs off for a second or more before it tries
    again, and processes that start together (srun, gcloud --worker=all) often
    reach the coordinator before process 0 has opened it.
    """

    def __init__(self, runtime, seconds: int, deadline: float, state=None):
        self._runtime = runtime
        self._seconds = seconds
        self._deadline = deadline
        self._state = state

    def __getattr__(self, name: str):
        return getattr(self._runtime, name)

    def get_distributed_runtime_service(self, address, *args, **kwargs):
        address = bind_address(address, getattr(self._state, "coordinator_address", None), os.environ)
        try:
            service = self._runtime.get_distributed_runtime_service(address, *args, cluster_register_timeout=self._seconds, **kwargs)
        except TypeError:  # a jaxlib without the parameter
            service = self._runtime.get_distributed_runtime_service(address, *args, **kwargs)
        from devctl.probe.channel import emit

        emit("listening", address=address, **_exposure(address))
        return service

    def get_distributed_runtime_client(self, address, *args, **kwargs):
        if not wait_until_listening(address, self._deadline - time.monotonic()):
            give_up_joining()  # nobody listens there: no use starting a client that retries past --timeout
        from devctl.probe.channel import emit

        emit("reached", address=address)
        return self._runtime.get_distributed_runtime_client(address, *args, **kwargs)


def bind_address(jax_choice: str, coordinator: str | None, environ) -> str:
    """Where process 0's service listens: the coordinator's own address, unless the user set JAX_COORDINATOR_BIND_ADDRESS."""
    if environ.get("JAX_COORDINATOR_BIND_ADDRESS") or not coordinator:
        return jax_choice
    return coordinator


def _exposure(address: str) -> dict:
    """Whether the service listens on loopback only, and whether the address said so literally (for the join-failure hint)."""
    host = address.rpartition(":")[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
        return {"loopback_only": ip.is_loopback, "loopback_literal": ip.is_loopback}
    except ValueError:
        pass
    try:  # gRPC has just resolved it the same way; this is answered from the same sources
        resolved = {str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        loopback = bool(resolved) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in resolved)
    except (OSError, ValueError):
        loopback = False
    return {"loopback_only": loopback, "loopback_literal": host == "localhost"}


def wait_until_listening(address: str, seconds: float, poll_s: float = 0.01) -> bool:
    """Whether HOST:PORT accepted a TCP connection within `seconds` (False at once for an address without a port)."""
    import socket

    host, _, port = str(address).rpartition(":")
    if not port.isdigit():
        return False
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=max(0.1, min(1.0, remaining))).close()
            return True
        except OSError:
            if remaining <= 0:
                return False
            time.sleep(poll_s)


def give_up_joining_at(deadline: float) -> threading.Event:
    """A client that cannot reach the coordinator retries well past its init timeout: end it on time.

    Returns the event to set once joined. The parent names who is missing from
    JAX's log, as for every failed join.
    """
    joined = threading.Event()

    def watch() -> None:
        if not joined.wait(max(0.0, deadline - time.monotonic())):
            give_up_joining()

    threading.Thread(target=watch, name="devctl-join-deadline", daemon=True).start()
    return joined


def give_up_joining() -> None:
    """End the child now: its join cannot succeed within --timeout (JAX's atexit shutdown would wait for peers)."""
    from devctl.probe.channel import emit, release_runtime

    emit("join_timeout")
    release_runtime()
    os._exit(1)
