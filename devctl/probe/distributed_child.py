"""The child of `devctl ... --distributed`: join the cluster, check that every process agrees on it, share this process's report, gather every report on process 0, and leave together.

Started as `python -m devctl.probe.distributed -` (see devctl.probe.distributed).
It joins with bounded timeouts (devctl.probe.distributed_runtime), optionally
runs the same per-backend probe as devctl.probe.backends, then `key_value_set`s
the local report; process 0 reads every report with `blocking_key_value_get`
against one deadline and publishes which processes were missing, so every
process ends the same way. Every step sends an event to the parent, which
names the phase a child died in.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from typing import Any

from devctl.probe.distributed_failures import count_mismatch
from devctl.probe.distributed_liveness import POLL_S, Liveness, peers_watched
from devctl.probe.distributed_runtime import (
    JOIN_GRACE_S,
    give_up_joining_at,
    join,
    prefer_gloo,
)
from devctl.text import first_line

# Non-zero processes wait for process 0's verdict this much longer than its gather lasts.
_VERDICT_MARGIN_S = 3
_REPORT_KEY = "devctl/report/{}"
_VERDICT_KEY = "devctl/verdict"
_VIEW_KEY = "devctl/view/{}"
_VIEW_DIR = "devctl/view/"
_ROLL_CALL_BARRIER = "devctl/roll-call"
_ROLL_CALL_READ_BARRIER = "devctl/roll-call-read"
_LEAVE_BARRIER = "devctl/leave"


def main() -> None:
    """Join, roll call, probe and share, gather, leave: every way out is an event for the parent and an os._exit."""
    from devctl.probe.channel import emit

    # jax first, the request second: a child started before devctl parsed its flags imports jax meanwhile.
    emit("phase", kind="import", name="jax")
    import jax
    import jaxlib
    from jax._src import distributed

    emit("versions", jax=jax.__version__, jaxlib=jaxlib.__version__)
    request = json.loads(sys.stdin.readline() or "{}")
    _redirect_output(request.get("log_path"))
    timeout_s = float(request.get("timeout_s") or 30)
    prefer_gloo(jax)
    emit("phase", kind="join", name=request.get("coordinator") or "auto-detect", t=time.monotonic())
    deadline = time.monotonic() + timeout_s
    joined = give_up_joining_at(deadline + JOIN_GRACE_S)
    try:
        join(jax, distributed, request, timeout_s, deadline)
    except (ValueError, TypeError) as e:
        # JAX's own checks of the parameters it auto-detected or was given.
        _fail("usage", f"distributed: JAX found no complete cluster to join ({first_line(e).rstrip('.')}): {_HOW_TO_JOIN}")
    except Exception as e:
        _fail("join", _join_error(e, request))
    joined.set()
    state = distributed.global_state
    emit("joined", process_index=state.process_id, num_processes=state.num_processes, coordinator=state.coordinator_address, t=time.monotonic())
    _roll_call(state.client, state.process_id, state.num_processes, request, timeout_s)
    _take_part(jax, state.client, state.process_id, state.num_processes, request, timeout_s)


def _join_error(e: Exception, request: dict) -> str:
    if "Failed to start RPC server" in str(e):  # process 0 could not listen on the coordinator's port
        port = str(request.get("coordinator") or "").rpartition(":")[2] or "?"
        return f"distributed: process 0 could not start the coordinator ({first_line(e)}): is port {port} in use on this host? choose another"
    return f"distributed: could not join the cluster: {type(e).__name__}: {first_line(e)}"


_HOW_TO_JOIN = (
    "pass --coordinator HOST:PORT --num-processes N --process-id I, or run under a launcher JAX detects "
    "(SLURM srun, Open MPI mpirun, Cloud TPU, Kubernetes)"
)


def _roll_call(client, me: int, n: int, request: dict, timeout_s: float) -> None:
    """Compare every process's own idea of the cluster right after joining, and fail every process alike on a mismatch.

    JAX checks a process's id against process 0's count, nothing more: a
    process started with another --num-processes joins, and would then wait
    on the others (a multi-process backend, the gather) for what never comes.
    """
    from devctl.probe.channel import emit

    view = {"num_processes": n, "hostname": socket.gethostname(), "pid": os.getpid(), "given": request.get("num_processes") is not None}
    emit("phase", kind="roll-call", name=f"{n} processes")
    try:
        client.key_value_set(_VIEW_KEY.format(me), json.dumps(view))
        client.wait_at_barrier(_ROLL_CALL_BARRIER, _ms(timeout_s))
        views = {int(k.rsplit("/", 1)[1]): json.loads(v) for k, v in client.key_value_dir_get(_VIEW_DIR)}
    except Exception as e:
        _fail("join", f"distributed: process {me}: not every process answered devctl's roll call within {timeout_s:g} s of joining ({first_line(e)})")
    message = count_mismatch(views)
    if message is None:
        return
    # Said first: once process 0 leaves, JAX may end the others before they could say anything.
    emit("error", kind="usage", message=message)
    # Process 0 hosts the service: it must not leave before every process has read the views and said so.
    with contextlib.suppress(Exception):
        client.wait_at_barrier(_ROLL_CALL_READ_BARRIER, _ms(timeout_s))
    from devctl.probe.channel import release_runtime

    release_runtime()
    os._exit(1)


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _take_part(jax, client, me: int, n: int, request: dict, timeout_s: float) -> None:
    """Probe (if asked), share this process's report, gather (on process 0), and leave with the others."""
    from devctl.probe.channel import emit

    liveness = Liveness(client, me, n, stale_s=min(10.0, max(3.0, timeout_s / 2)))
    liveness.start()
    if request.get("probe") is not None:
        # A multi-process backend waits for every process's topology: a peer that died
        # after joining would hold the others here for minutes, unnamed.
        with peers_watched(liveness, "the backends were initializing"):
            emit("local_probe", **_probe_local(request["probe"]))
    emit("phase", kind="report", name="waiting for this process's report")
    line = sys.stdin.readline()
    if not line.strip():
        _fail("report", f"distributed: process {me}: devctl sent no report to share")
    client.key_value_set(_REPORT_KEY.format(me), line.strip())
    emit("phase", kind="gather", name=f"{n} processes", t=time.monotonic())
    reports, dead = _gather(client, n, timeout_s, liveness) if me == 0 or request.get("all_print") else (None, [])
    emit("phase", kind="verdict", name="process 0's verdict")
    missing, dead = _verdict(client, me, reports, dead, timeout_s)
    emit("gathered", process_index=me, num_processes=n, missing=missing, dead=dead, reports=reports, t=time.monotonic())
    liveness.stop()
    _leave(jax, client, n, missing, timeout_s)


def _probe_local(probe: dict) -> dict:
    """Every backend, as devctl.probe.backends does it, keeping only this process's own devices."""
    from jax._src import xla_bridge as xb

    from devctl.probe.backends import (
        init_backend,
        instrument_plugin_discovery,
        platforms_to_try,
    )
    from devctl.probe.channel import emit

    instrument_plugin_discovery(xb, emit, set())
    xb._discover_and_register_pjrt_plugins()
    backends, default, best = [], None, None
    for platform, priority, quiet in platforms_to_try(xb, probe.get("platforms")):
        emit("phase", kind="backend", name=platform)
        event = init_backend(xb, platform, quiet, bool(probe.get("memory_stats", True)))
        event["priority"] = priority
        backends.append(_own_devices(event))
        if event["status"] == "ok" and (best is None or priority > best):
            default, best = platform, priority
    return {"backends": backends, "default_platform": default}


def _own_devices(event: dict) -> dict:
    """A multi-process backend lists every device of the cluster; each process reports only its own."""
    devices = event.get("devices") or []
    event["global_device_count"] = len(devices) if event.get("status") == "ok" else None
    mine = event.get("process_index")
    event["devices"] = [d for d in devices if d.get("process_index") == mine]
    return event


def _gather(client, n: int, timeout_s: float, liveness) -> tuple[list[Any], list[int]]:
    """Every process's report in process order against one deadline (None: sent none), and the processes seen dead."""
    deadline = time.monotonic() + timeout_s
    reports: list[Any] = [None] * n
    dead: list[int] = []
    for i in range(n):
        while True:
            remaining = deadline - time.monotonic()
            # Short waits, so a peer that died is named in seconds rather than at the deadline;
            # past the deadline a 1 ms wait still collects a report that is already there.
            wait_ms = max(1, int(min(remaining, POLL_S) * 1000))
            try:
                reports[i] = json.loads(client.blocking_key_value_get(_REPORT_KEY.format(i), wait_ms))
                break
            except Exception:
                pass
            if remaining <= 0:
                break
            if i in liveness.dead():
                dead.append(i)
                break
    return reports, dead


def _verdict(client, me: int, reports: list[Any] | None, dead: list[int], timeout_s: float) -> tuple[list[int], list[int]]:
    """Process 0 publishes who was missing; the others wait for it, so every process ends on the same verdict."""
    if me == 0:
        missing = [i for i, r in enumerate(reports or []) if r is None]
        client.key_value_set(_VERDICT_KEY, json.dumps({"missing": missing, "dead": dead}))
        return missing, dead
    try:
        verdict = json.loads(client.blocking_key_value_get(_VERDICT_KEY, int((timeout_s + _VERDICT_MARGIN_S) * 1000)))
    except Exception:
        _fail("gather", f"distributed: process {me}: process 0 (the coordinator) did not finish the gather within {timeout_s:g} s")
    return verdict["missing"], verdict.get("dead") or []


def _leave(jax, client, n: int, missing: list[int], timeout_s: float) -> None:
    """Leave together: process 0 hosts the service, so it must not exit while the others still read from it."""
    live = [i for i in range(n) if i not in missing]
    try:
        client.wait_at_barrier(_LEAVE_BARRIER, int(timeout_s * 1000), live)
        together = True
    except Exception:
        together = False
    if together and not missing:
        try:
            jax.distributed.shutdown()  # a barrier of every process; with one missing it would wait, then abort
        except Exception:
            pass
    sys.stdout.flush()
    from devctl.probe.channel import release_runtime

    release_runtime()
    os._exit(0)


def _fail(kind: str, message: str) -> None:
    """Tell the parent why, and end the child at once."""
    from devctl.probe.channel import emit, release_runtime

    emit("error", kind=kind, message=message)
    release_runtime()
    os._exit(1)  # never run JAX's atexit shutdown: it waits for peers that may not exist


def _redirect_output(path: str | None) -> None:
    """XLA, gloo and plugins write freely to fds 1 and 2; keep all of it for the parent, which reads JAX's verdicts there."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
