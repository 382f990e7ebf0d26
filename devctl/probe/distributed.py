"""Join a JAX cluster in a child process and exchange one JSON report per process through JAX's own key-value store.

Parent side (`exchange`, no jax import): starts the child, sends it this
process's report (or builds the report from the child's local backend probe),
and turns every way the cluster can fail into one line naming the processes
at fault.

Child side (`python -m devctl.probe.distributed -`): `jax.distributed.initialize`
with bounded timeouts, optionally the same per-backend probe as
devctl.probe.backends, then `key_value_set` of the local report; process 0
reads every report with `blocking_key_value_get` against one deadline and
publishes which processes were missing, so every process ends the same way.

JAX aborts the whole process (absl FATAL) when a peer never registers or the
service goes away, which is why this runs in a child under the watchdog, with
its output kept in a file the parent reads to name the missing processes.
"""

from __future__ import annotations

import contextlib
import inspect
import ipaddress
import json
import math
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from devctl.errors import DevctlError, UsageError
from devctl.model.distributed import ClusterParams, Joined

MODULE = "devctl.probe.distributed"
# Joining is bounded by --timeout, counted from when the child starts to join (jax imported).
# The client keeps retrying registration this much longer than the service waits for
# every process, so the service's answer (which names the processes that never
# registered) arrives before the client gives up with a bare DEADLINE_EXCEEDED.
_CONNECT_MARGIN_S = 1
# ... and the child gives up this long after --timeout, whatever JAX is doing: 1 s for the
# service's answer above, 1 s to leave. So a join waits at most --timeout + 2 s (README).
JOIN_GRACE_S = 2
_LOG_NAME = "child.log"
# Non-zero processes wait for process 0's verdict this much longer than its gather lasts.
_VERDICT_MARGIN_S = 3
# Parent watchdog over the child: every phase of the child is bounded by --timeout
# plus the margins above, and the child sends an event when it enters each phase.
_WATCHDOG_MARGIN_S = 8
_REPORT_KEY = "devctl/report/{}"
_ALIVE_KEY = "devctl/alive/{}"
_ALIVE_DIR = "devctl/alive/"
_BEAT_S = 1.0
_POLL_S = 1.0
_VERDICT_KEY = "devctl/verdict"
_VIEW_KEY = "devctl/view/{}"
_VIEW_DIR = "devctl/view/"
_ROLL_CALL_BARRIER = "devctl/roll-call"
_ROLL_CALL_READ_BARRIER = "devctl/roll-call-read"
_LEAVE_BARRIER = "devctl/leave"
_PEER_FAILURE_BARRIER = "devctl/peer-failure"


@dataclass(frozen=True)
class Exchanged:
    joined: Joined
    reports: list[Any] | None  # every process's report in process order; None where this process prints nothing
    join_s: float | None = None  # from asking to join to joined: mostly waiting for the last process to start
    gather_s: float | None = None  # from sharing this process's report to the verdict: waiting for the slowest report


@dataclass
class _Progress:
    """What the parent learned from the child's events so far."""

    phase: str = "start"
    phase_name: str | None = None
    joined: Joined | None = None
    reached: bool = False  # the coordinator's port accepted a connection
    listening: dict | None = None  # on process 0: where the coordinator listens ({address, loopback_only})
    plugin_events: list[dict] = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    marks: dict[str, float] = field(default_factory=dict)  # monotonic time each milestone was seen here


def exchange(
    params: ClusterParams,
    *,
    timeout_s: float,
    all_print: bool = False,
    report: Any = None,
    make_report: Callable[[], Any] | None = None,
    probe: dict | None = None,
    build_report: Callable[[dict, Joined, _Progress], Any] | None = None,
) -> Exchanged:
    """Join the cluster, share this process's JSON-able report, and get every report on process 0.

    The report is `report`, given up front; or `make_report()`, called here
    while the child imports jax and joins; or, with `probe` ({"platforms",
    "memory_stats"}), the child initializes the backends after joining (on a
    multi-host TPU slice they can only be initialized then) and
    `build_report(local_probe, joined, progress)` makes the report from what
    it found.

    Raises UsageError when JAX rejects the cluster parameters, DevctlError when
    a process never joined or sent no report (named), or this process failed.
    """
    from devctl.probe.runner import (
        collect,
        end_child,
        owned_tempdir,
        start_child,
        take_prestarted,
    )

    progress = _Progress()
    with owned_tempdir("distributed", (_LOG_NAME,)) as tmp:
        log_path = os.path.join(tmp, _LOG_NAME)
        request = {
            "coordinator": params.coordinator,
            "num_processes": params.num_processes,
            "process_id": params.process_id,
            "timeout_s": timeout_s,
            "all_print": all_print,
            "probe": probe,
            "log_path": log_path,
        }
        # Request and report go through the child's stdin as two JSON lines; the
        # report may only exist once the child has probed its backends.
        # `devctl` may have started this child before parsing its flags, so jax imports meanwhile.
        child = take_prestarted(MODULE) or start_child(MODULE, None)
        _send_line(child, request)
        if probe is None:
            if make_report is not None:
                try:
                    report = make_report()
                except BaseException:
                    end_child(child)
                    raise
            _send_line(child, report, close=True)

        def on_event(event: dict) -> None:
            _track(event, progress)
            if event.get("event") == "local_probe" and build_report is not None:
                _send_line(child, build_report(event, progress.joined, progress), close=True)

        result = collect(child, timeout_s=timeout_s + _WATCHDOG_MARGIN_S, on_event=on_event)
        log = result.output_tail + _read(log_path)  # the tail: what it said before it had the request
    return _outcome(result, progress, log, params, timeout_s, all_print)


def _send_line(child, obj: Any, close: bool = False) -> None:
    try:
        child.proc.stdin.write(json.dumps(obj, default=str).encode() + b"\n")
        child.proc.stdin.flush()
        if close:
            child.proc.stdin.close()
    except (BrokenPipeError, ValueError):  # the child died already; collect() says how
        pass


def _track(event: dict, progress: _Progress) -> None:
    kind = event.get("event")
    milestone = event.get("kind") if kind == "phase" else kind
    # The child stamps its milestones (CLOCK_MONOTONIC is system-wide): events may be read late, after make_report.
    progress.marks.setdefault(str(milestone), event.get("t") or time.monotonic())
    if kind == "phase":
        progress.phase, progress.phase_name = event.get("kind", "?"), event.get("name")
    elif kind == "joined":
        progress.joined = Joined(event["process_index"], event["num_processes"], event.get("coordinator"))
    elif kind == "reached":
        progress.reached = True
    elif kind == "listening":
        progress.listening = event
    elif kind == "plugin":
        progress.plugin_events.append(event)
    elif kind == "versions":
        progress.versions = {"jax": event.get("jax"), "jaxlib": event.get("jaxlib")}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _outcome(result, progress: _Progress, log: str, params: ClusterParams, timeout_s: float, all_print: bool) -> Exchanged:
    gathered = result.last("gathered")
    if gathered is not None:
        # What happens after the verdict (leaving, shutdown) cannot change it: an abort there is ignored.
        joined = progress.joined or Joined(gathered["process_index"], gathered["num_processes"], params.coordinator)
        missing = gathered.get("missing") or []
        prints = joined.process_index == 0 or all_print
        if missing:  # every process fails, not only the one that prints: a scheduler reads each one's exit code
            raise DevctlError(_missing_message(missing, gathered.get("dead") or [], joined, timeout_s))
        marks = progress.marks
        join_s = marks["joined"] - marks["join"] if "join" in marks and "joined" in marks else None
        gather_s = marks["gathered"] - marks["gather"] if "gather" in marks and "gathered" in marks else None
        return Exchanged(joined, gathered.get("reports") if prints else None, join_s, gather_s)
    error = result.last("error")
    if error is not None:
        cls = UsageError if error.get("kind") == "usage" else DevctlError
        raise cls(error.get("message") or "distributed: the cluster probe failed")
    raise _crash_error(result, progress, log, params, timeout_s)


def _who(joined: Joined | None, params: ClusterParams) -> str:
    index = joined.process_index if joined else params.process_id
    return f"process {index}" if index is not None else "this process"


def _missing_message(missing: list[int], dead: list[int], joined: Joined, timeout_s: float) -> str:
    n = joined.num_processes
    parts = []
    stopped = [i for i in missing if i in dead]
    silent = [i for i in missing if i not in dead]
    if stopped:
        parts.append(f"{_plural(stopped, 'process', 'processes')} {_ids(stopped)} of {n} stopped (died or was killed) during the gather")
    if silent:
        parts.append(
            f"{_plural(silent, 'process', 'processes')} {_ids(silent)} of {n} joined the cluster but sent no report "
            f"within {timeout_s:g} s (hung or slow)"
        )
    hosts = "that host" if len(missing) == 1 else "those hosts"
    return f"distributed: {'; '.join(parts)}; run devctl list on {hosts} to see why"


def _crash_error(result, progress: _Progress, log: str, params: ClusterParams, timeout_s: float) -> DevctlError:
    who = _who(progress.joined, params)
    duplicate = _duplicate_in(log)
    if progress.phase in ("start", "import"):
        return DevctlError(f"distributed: {who}: the probe child {result.failure_text()} while importing jax{_log_hint(log)}")
    if progress.phase == "join":
        return _join_failure(log, params, progress, timeout_s, who)
    if duplicate is not None:  # a second process registered with a running member's id; JAX then ends every member
        return UsageError(
            f"distributed: {who} was ended by JAX: a second process tried to join as process {duplicate} while the cluster ran: "
            f"two processes were given --process-id {duplicate}; give each process its own"
        )
    where = {
        "roll-call": "comparing every process's --num-processes",
        "backend": f"initializing backend {progress.phase_name!r}",
        "plugin": f"loading plugin {progress.phase_name}",
        "report": "waiting for its own report",
        "gather": "gathering the reports",
        "verdict": "waiting for process 0's verdict",
    }.get(progress.phase, f"in phase {progress.phase!r}")
    if progress.phase in ("gather", "verdict") and _service_lost(log):
        return DevctlError(f"distributed: {who} lost the coordinator (process 0) during the gather: it died or was killed")
    if progress.joined is not None and _JAX_GAVE_UP in log:
        # JAX ends every process once the service reports a failure; the process that failed is named elsewhere.
        return DevctlError(
            f"distributed: {who} was ended by JAX while {where}: another process of the cluster failed (process 0 names it, unless it is the one)"
        )
    return DevctlError(f"distributed: {who}: the probe child {result.failure_text()} while {where}{_log_hint(log)}")


_SAME_ID = "give each process its own --process-id"
_SAME_COUNT = "give every process the same --num-processes"


def _join_failure(log: str, params: ClusterParams, progress: _Progress, timeout_s: float, who: str) -> DevctlError:
    """Why this process is not in a cluster after --timeout, from JAX's own words where it said any."""
    me = params.process_id
    if _NEWER_REGISTRATION in log:  # the service dropped this process for a later one with the same id
        return UsageError(
            f"distributed: {who}: another process joined the cluster as process {me if me is not None else '(this id)'} "
            f"after this one: two processes were given the same process id; {_SAME_ID}"
        )
    m = _OUT_OF_RANGE_RE.search(log)
    if m:
        given = f" (--num-processes {params.num_processes})" if params.num_processes is not None else ""
        return UsageError(
            f"distributed: {who} is not part of the coordinator's cluster: process 0 was started with {m.group(1)} or fewer "
            f"processes, this process with more{given}; {_SAME_COUNT}"
        )
    barrier = parse_register_barrier(log)
    if barrier is not None:
        return _barrier_failure(barrier, log, params, progress, timeout_s)
    if params.process_id == 0:  # it is the coordinator: the others did not come, and JAX's log did not say which
        return DevctlError(
            f"distributed: not every process joined the cluster within {timeout_s:g} s (JAX did not say which); "
            f"every process must run the same devctl command with --distributed{_loopback_hint(progress)}"
        )
    where = params.coordinator or "the auto-detected address"
    if progress.reached:
        return DevctlError(
            f"distributed: {who} could not join the cluster at {where} within {timeout_s:g} s: its port is open, but the cluster "
            f"did not form (a process is missing, process 0 names it; or what listens there is not process 0)"
        )
    return DevctlError(
        f"distributed: {who} got no answer from the coordinator (process 0) at {where} within {timeout_s:g} s: "
        f"start process 0 too, and check that this host can reach that address and port"
    )


def _barrier_failure(barrier, log: str, params: ClusterParams, progress: _Progress, timeout_s: float) -> DevctlError:
    missing, arrived, total = barrier
    if params.num_processes is not None and params.num_processes != total:
        return UsageError(
            f"distributed: the coordinator (process 0) expects {total} processes, this process was given "
            f"--num-processes {params.num_processes}; {_SAME_COUNT}"
        )
    named = _ids(missing) if missing else "(JAX did not name them)"
    more = total - arrived - len(missing)
    if missing and more > 0:
        named += f" and {more} more"
    count = total - arrived
    message = (
        f"distributed: {count} of {total} {_plural(range(total), 'process', 'processes')} never joined the cluster "
        f"within {timeout_s:g} s: missing process {'id' if count == 1 else 'ids'} {named}"
    )
    if _SAME_TASK_AGAIN in log:  # only process 0, which hosts the service, sees this
        return UsageError(
            f"{message}, and two processes registered with the same process id (one id given twice leaves another unused); {_SAME_ID}"
        )
    return DevctlError(f"{message}; every process must run the same devctl command with --distributed{_loopback_hint(progress)}")


def _loopback_hint(progress: _Progress) -> str:
    """Process 0 listened only on loopback because the coordinator's name resolves there (Debian's 127.0.1.1): say so."""
    listening = progress.listening or {}
    if not listening.get("loopback_only") or listening.get("loopback_literal"):
        return ""
    return (
        f" (the coordinator listened only on loopback: {listening.get('address')} resolves to a loopback address on this host, "
        f"which processes on other hosts cannot reach; give --coordinator an address they can reach, or set JAX_COORDINATOR_BIND_ADDRESS)"
    )


# What the coordination service says (jax 0.4.36 to 0.12) when one process id registers twice:
# to the earlier of the two, while they wait for the others;
_NEWER_REGISTRATION = "request from a newer incarnation"
# in process 0's log, for the same event (it does not say which id);
_SAME_TASK_AGAIN = "more recent barrier call for [Init]Wait_for_all_tasks_to_register"
# to every member, when the second one comes after the cluster formed;
_DIFFERENT_INCARNATION_RE = re.compile(r"(\d+) unexpectedly tried to connect with a different incarnation")
# and to a process whose id is not below process 0's --num-processes.
_OUT_OF_RANGE_RE = re.compile(r"Unexpected task registered with task=(\d+)")


def _duplicate_in(log: str) -> int | None:
    m = _DIFFERENT_INCARNATION_RE.search(log)
    return int(m.group(1)) if m else None


# The coordination service's own account of a registration barrier that timed out:
#   "Id: [Init]Wait_for_all_tasks_to_register::0 ... # of tasks that reached the barrier: 2/3.
#    The first task at the barrier: 0. Some timed out task names:\n2\n [type.googleapis..."
_BARRIER_RE = re.compile(
    r"Wait_for_all_tasks_to_register.*?# of tasks that reached the barrier: (\d+)/(\d+)\..*?"
    r"Some timed out task names:\s*\n(?P<names>(?:[^\n]*\n)*?)\s*(?:\[|RPC:|$)",
    re.S,
)
_TASK_RE = re.compile(r"^\s*(?:\S*task:)?(\d+)\s*$")


def parse_register_barrier(log: str) -> tuple[list[int], int, int] | None:
    """(missing process ids, processes that registered, all processes) from JAX's log, or None."""
    m = _BARRIER_RE.search(log)
    if not m:
        return None
    missing = []
    for line in m.group("names").splitlines():
        t = _TASK_RE.match(line)
        if t:
            missing.append(int(t.group(1)))
    return sorted(set(missing)), int(m.group(1)), int(m.group(2))


_JAX_GAVE_UP = "distributed service detected fatal errors"


def _service_lost(log: str) -> bool:
    return "coordination service" in log or "UNAVAILABLE" in log


def _log_hint(log: str) -> str:
    """The child's own last word: absl's FATAL/ERROR line, else its last line saying error, else its last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith(("F", "E")) and "]" in line and line[1:2].isdigit():
            return f" ({line.split('] ', 1)[-1][:200]})"
    plain = [ln for ln in lines if not ln.startswith(("@", "***", "I0", "W0", "WARNING"))]
    errors = [ln for ln in plain if "error" in ln.lower()]
    if errors or plain:
        return f" (last output: {(errors or plain)[-1][:200]})"
    return ""


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids)


def _plural(items, one: str, many: str) -> str:
    return one if len(list(items)) == 1 else many


# ---------------------------------------------------------------- child side


def _child_main() -> None:
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
    _prefer_gloo(jax)
    emit("phase", kind="join", name=request.get("coordinator") or "auto-detect", t=time.monotonic())
    deadline = time.monotonic() + timeout_s
    _give_up_joining_at(deadline + JOIN_GRACE_S)
    try:
        _join(jax, distributed, request, timeout_s, deadline)
    except (ValueError, TypeError) as e:
        # JAX's own checks of the parameters it auto-detected or was given.
        _fail("usage", f"distributed: JAX found no complete cluster to join ({_first_line(e).rstrip('.')}): {_HOW_TO_JOIN}")
    except Exception as e:
        _fail("join", _join_error(e, request))
    _joined.set()
    state = distributed.global_state
    emit("joined", process_index=state.process_id, num_processes=state.num_processes, coordinator=state.coordinator_address, t=time.monotonic())
    _roll_call(state.client, state.process_id, state.num_processes, request, timeout_s)
    _take_part(jax, state.client, state.process_id, state.num_processes, request, timeout_s)


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
        _fail("join", f"distributed: process {me}: not every process answered devctl's roll call within {timeout_s:g} s of joining ({_first_line(e)})")
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


def count_mismatch(views: dict[int, dict]) -> str | None:
    """One line naming the processes whose num_processes differs from process 0's (which the coordinator uses), or None."""
    expected = (views.get(0) or {}).get("num_processes")
    odd = [i for i in sorted(views) if views[i].get("num_processes") != expected]
    if not odd:
        return None

    def source(v: dict) -> str:
        return "--num-processes" if v.get("given") else "auto-detected"

    host0 = (views.get(0) or {}).get("hostname", "?")
    named = "; ".join(f"process {i} ({views[i].get('hostname', '?')}) has {views[i].get('num_processes')} ({source(views[i])})" for i in odd[:8])
    more = f" and {len(odd) - 8} more" if len(odd) > 8 else ""
    return (
        f"distributed: the processes disagree on the number of processes: process 0 ({host0}), the coordinator, has {expected} "
        f"({source(views.get(0) or {})}); {named}{more}; {_SAME_COUNT}"
    )


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


def _take_part(jax, client, me: int, n: int, request: dict, timeout_s: float) -> None:
    """Probe (if asked), share this process's report, gather (on process 0), and leave with the others."""
    from devctl.probe.channel import emit

    liveness = _Liveness(client, me, n, stale_s=min(10.0, max(3.0, timeout_s / 2)))
    liveness.start()
    if request.get("probe") is not None:
        # A multi-process backend waits for every process's topology: a peer that died
        # after joining would hold the others here for minutes, unnamed.
        with _peers_watched(liveness, "the backends were initializing"):
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


def _join_error(e: Exception, request: dict) -> str:
    if "Failed to start RPC server" in str(e):  # process 0 could not listen on the coordinator's port
        port = str(request.get("coordinator") or "").rpartition(":")[2] or "?"
        return f"distributed: process 0 could not start the coordinator ({_first_line(e)}): is port {port} in use on this host? choose another"
    return f"distributed: could not join the cluster: {type(e).__name__}: {_first_line(e)}"


_HOW_TO_JOIN = (
    "pass --coordinator HOST:PORT --num-processes N --process-id I, or run under a launcher JAX detects "
    "(SLURM srun, Open MPI mpirun, Cloud TPU, Kubernetes)"
)


_joined = threading.Event()


def _give_up_joining_at(deadline: float) -> None:
    """A client that cannot reach the coordinator retries well past its init timeout: end it on time.

    The parent names who is missing from JAX's log, as for every failed join.
    """

    def watch() -> None:
        if not _joined.wait(max(0.0, deadline - time.monotonic())):
            _give_up_joining()

    threading.Thread(target=watch, name="devctl-join-deadline", daemon=True).start()


def _give_up_joining() -> None:
    from devctl.probe.channel import emit, release_runtime

    emit("join_timeout")
    release_runtime()
    os._exit(1)


def _fail(kind: str, message: str) -> None:
    from devctl.probe.channel import emit, release_runtime

    emit("error", kind=kind, message=message)
    release_runtime()
    os._exit(1)  # never run JAX's atexit shutdown: it waits for peers that may not exist


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _redirect_output(path: str | None) -> None:
    """XLA, gloo and plugins write freely to fds 1 and 2; keep all of it for the parent, which reads JAX's verdicts there."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _prefer_gloo(jax) -> None:
    """CPU devices of other processes are only visible with cross-process CPU collectives (gloo)."""
    if os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"):
        return
    try:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except Exception:  # an older jax without the option: CPU stays single-process, and the report says so
        pass


def _join(jax, distributed, request: dict, timeout_s: float, deadline: float) -> None:
    seconds = max(1, math.ceil(timeout_s))
    _bound_joining(distributed, seconds, deadline)
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


class _BoundedRuntime:
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
            _give_up_joining()  # nobody listens there: no use starting a client that retries past --timeout
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
        resolved = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
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


def _bound_joining(distributed, seconds: int, deadline: float) -> None:
    # jax._src.distributed calls the runtime through `_jax` (jax 0.6 on) or `xla_extension` (before).
    for name in ("_jax", "xla_extension"):
        runtime = getattr(distributed, name, None)
        if runtime is not None and hasattr(runtime, "get_distributed_runtime_service"):
            setattr(distributed, name, _BoundedRuntime(runtime, seconds, deadline, getattr(distributed, "global_state", None)))
            return


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
            wait_ms = max(1, int(min(remaining, _POLL_S) * 1000))
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


class _Liveness:
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
def _peers_watched(liveness: _Liveness, while_what: str):
    """End this process with a named error as soon as a peer is seen dead while `while_what`."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_POLL_S):
            dead = liveness.dead()
            if dead and not done.is_set():
                from devctl.probe.channel import emit, release_runtime

                emit(
                    "error", kind="peer",
                    message=f"distributed: {_plural(dead, 'process', 'processes')} {_ids(dead)} of {liveness.n} stopped "
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


if __name__ == "__main__":
    _child_main()
