"""Which peers of the cluster are still alive, told in seconds, from counters each process bumps in JAX's key-value store.

Used by devctl.probe.distributed_child while it waits on its peers (the
backends' initialization, the gather).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from devctl.probe.distributed_failures import ids, plural

_ALIVE_KEY = "devctl/alive/{}"
_ALIVE_DIR = "devctl/alive/"
_BEAT_S = 1.0
# How often a waiting process looks at its peers' counters.
POLL_S = 1.0
_PEER_FAILURE_BARRIER = "devctl/peer-failure"


class Liveness:
    """Each process bumps a counter in the key-value store every second; a counter that stops moving is a process that died.

    JAX's own heartbeats act only after heartbeat_timeout, and then abort every
    process without naming the dead one; this names it in seconds. Counters,
    not timestamps: hosts' clocks need not agree.
    """

    def __init__(self, client, me: int, n: int, stale_s: float):
        self.client, self.me, self.n, self.stale_s = client, me, n, stale_s
        self._stop = threading.Event()
        self._since = time.monotonic()
        self._seen: dict[int, tuple[str, float]] = {}  # process -> (last counter, when it last moved, here)
        self._thread = threading.Thread(target=self._beat, name="devctl-liveness", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * _BEAT_S)

    def _beat(self) -> None:
        count = 0
        while not self._stop.is_set():
            count += 1
            try:
                self.client.key_value_set(_ALIVE_KEY.format(self.me), str(count), allow_overwrite=True)
            except Exception:
                pass  # the service is going away; the main thread finds out on its own
            self._stop.wait(_BEAT_S)

    def dead(self) -> list[int]:
        """Other processes whose counter has not moved for stale_s (call at least once a second)."""
        now = time.monotonic()
        try:
            entries = self.client.key_value_dir_get(_ALIVE_DIR)
        except Exception:
            return []
        for key, value in entries:
            index = key.rsplit("/", 1)[-1]
            if index.isdigit() and self._seen.get(int(index), (None,))[0] != value:
                self._seen[int(index)] = (value, now)
        return [i for i in range(self.n) if i != self.me and now - self._seen.get(i, (None, self._since))[1] > self.stale_s]


@contextlib.contextmanager
def peers_watched(liveness: Liveness, while_what: str):
    """End this process with a named error as soon as a peer is seen dead while `while_what`."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            dead = liveness.dead()
            if dead and not done.is_set():
                from devctl.probe.channel import emit, release_runtime

                emit(
                    "error", kind="peer",
                    message=f"distributed: {plural(dead, 'process', 'processes')} {ids(dead)} of {liveness.n} stopped "
                    f"(died or was killed) after joining the cluster, while {while_what}",
                )  # fmt: skip
                # Process 0 hosts the service: leaving together lets every survivor say this, not abort.
                live = [i for i in range(liveness.n) if i not in dead]
                with contextlib.suppress(Exception):
                    liveness.client.wait_at_barrier(_PEER_FAILURE_BARRIER, int((liveness.stale_s + 3) * 1000), live)
                release_runtime()
                os._exit(1)

    thread = threading.Thread(target=watch, name="devctl-peer-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
