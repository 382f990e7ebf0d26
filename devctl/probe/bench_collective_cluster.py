"""`devctl bench collective --distributed`, in the probe child: join the cluster, agree on every choice, share figures.

Every process runs the same jitted collectives in the same order, or they wait on each other forever. So
every choice that depends on a timing (how many samples a cell takes, whether the default sweep goes on to
a larger size, whether a size fits) is made once, by process 0, and read by the others from JAX's key-value
store (`Agreement`). Joining reuses the bounded join of `devctl list --distributed`
(devctl.probe.distributed_runtime). Runs in the child only; jax is passed in.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from devctl.probe.bench import ChildProblem
from devctl.text import first_line

_AGREE_KEY = "devctl/collective/agree/{}"
_FIGURES_KEY = "devctl/collective/figures/{}"
_LEAVE_BARRIER = "devctl/collective/leave"
# A process waits this long for process 0's choice beyond the cell it is timing: a slow cell is not a dead peer.
_AGREE_WAIT_S = 120


class Agreement:
    """One process alone: its own choice. In a cluster: process 0's choice, the same on every process."""

    def __init__(self, client=None, me: int = 0, n: int = 1, timeout_s: float = 30.0):
        self.client, self.me, self.n, self.timeout_s = client, me, n, timeout_s
        self._count = 0

    def agree(self, value: Any) -> Any:
        if self.client is None or self.n == 1:
            return value
        self._count += 1
        key = _AGREE_KEY.format(self._count)
        if self.me == 0:
            self.client.key_value_set(key, json.dumps(value))
            return value
        wait_ms = int((self.timeout_s + _AGREE_WAIT_S) * 1000)
        try:
            return json.loads(self.client.blocking_key_value_get(key, wait_ms))
        except Exception as e:
            raise ChildProblem(
                f"distributed: process 0 gave no answer within {wait_ms / 1000:g} s (it stopped, or hangs): {type(e).__name__}: {first_line(e)}"
            ) from e

    def gather(self, figures: list[dict]) -> list[dict] | None:
        """Every process's own figures, on process 0 (each with its process index and hostname); None elsewhere."""
        if self.client is None or self.n == 1:
            return [dict(f, process_index=0, hostname=socket.gethostname()) for f in figures]
        mine = [dict(f, process_index=self.me, hostname=socket.gethostname()) for f in figures]
        self.client.key_value_set(_FIGURES_KEY.format(self.me), json.dumps(mine))
        if self.me != 0:
            return None
        out: list[dict] = []
        for i in range(self.n):
            try:
                out += json.loads(self.client.blocking_key_value_get(_FIGURES_KEY.format(i), int(self.timeout_s * 1000)))
            except Exception:  # a process that sent nothing: its figures are missing, the cells still stand
                pass
        return out


def join_cluster(jax, cluster: dict) -> Agreement:
    """jax.distributed.initialize, bounded by --timeout as `devctl list --distributed` bounds it; raises on failure."""
    from jax._src import distributed

    from devctl.probe.channel import emit
    from devctl.probe.distributed_runtime import JOIN_GRACE_S, give_up_joining_at, join, prefer_gloo

    timeout_s = float(cluster.get("timeout_s") or 30)
    prefer_gloo(jax)
    emit("phase", kind="join", name=cluster.get("coordinator") or "auto-detect")
    deadline = time.monotonic() + timeout_s
    joined = give_up_joining_at(deadline + JOIN_GRACE_S)
    join(jax, distributed, cluster, timeout_s, deadline)
    joined.set()
    state = distributed.global_state
    emit("joined", process_index=state.process_id, num_processes=state.num_processes, coordinator=state.coordinator_address)
    return Agreement(state.client, state.process_id, state.num_processes, timeout_s)


def leave(jax, agreement: Agreement) -> None:
    """Leave together: process 0 hosts the key-value store the others may still be reading."""
    if agreement.client is None:
        return
    try:
        agreement.client.wait_at_barrier(_LEAVE_BARRIER, int(agreement.timeout_s * 1000))
        jax.distributed.shutdown()
    except Exception:
        pass
