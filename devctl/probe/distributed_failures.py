"""Why a cluster probe failed, in one line naming the processes at fault: from the child's events and JAX's own log.

The parent (devctl.probe.distributed) calls missing_message and crash_error;
the child (devctl.probe.distributed_child) calls count_mismatch at its roll
call. Nothing here imports jax: these read text and events.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from devctl.errors import DevctlError, InputRejected
from devctl.model.distributed import ClusterParams, Joined

if TYPE_CHECKING:
    from devctl.probe.distributed import Progress

_SAME_ID = "give each process its own --process-id"
SAME_COUNT = "give every process the same --num-processes"


def _who(joined: Joined | None, params: ClusterParams) -> str:
    index = joined.process_index if joined else params.process_id
    return f"process {index}" if index is not None else "this process"


def missing_message(missing: list[int], dead: list[int], joined: Joined, timeout_s: float) -> str:
    """Process 0's verdict named some processes missing: which died during the gather, which joined and stayed silent."""
    n = joined.num_processes
    parts = []
    stopped = [i for i in missing if i in dead]
    silent = [i for i in missing if i not in dead]
    if stopped:
        parts.append(f"{plural(stopped, 'process', 'processes')} {ids(stopped)} of {n} stopped (died or was killed) during the gather")
    if silent:
        parts.append(
            f"{plural(silent, 'process', 'processes')} {ids(silent)} of {n} joined the cluster but sent no report "
            f"within {timeout_s:g} s (hung or slow)"
        )
    hosts = "that host" if len(missing) == 1 else "those hosts"
    return f"distributed: {'; '.join(parts)}; run devctl list on {hosts} to see why"


def crash_error(result, progress: Progress, log: str, params: ClusterParams, timeout_s: float) -> DevctlError:
    """The child ended without a verdict or an error event: say why, from the phase it was in and JAX's log."""
    who = _who(progress.joined, params)
    duplicate = _duplicate_in(log)
    if progress.phase in ("start", "import"):
        return DevctlError(f"distributed: {who}: the probe child {result.failure_text()} while importing jax{_log_hint(log)}")
    if progress.phase == "join":
        return _join_failure(log, params, progress, timeout_s, who)
    if duplicate is not None:  # a second process registered with a running member's id; JAX then ends every member
        return InputRejected(
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


def _join_failure(log: str, params: ClusterParams, progress: Progress, timeout_s: float, who: str) -> DevctlError:
    """Why this process is not in a cluster after --timeout, from JAX's own words where it said any."""
    me = params.process_id
    if _NEWER_REGISTRATION in log:  # the service dropped this process for a later one with the same id
        return InputRejected(
            f"distributed: {who}: another process joined the cluster as process {me if me is not None else '(this id)'} "
            f"after this one: two processes were given the same process id; {_SAME_ID}"
        )
    m = _OUT_OF_RANGE_RE.search(log)
    if m:
        given = f" (--num-processes {params.num_processes})" if params.num_processes is not None else ""
        return InputRejected(
            f"distributed: {who} is not part of the coordinator's cluster: process 0 was started with {m.group(1)} or fewer "
            f"processes, this process with more{given}; {SAME_COUNT}"
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


def _barrier_failure(barrier, log: str, params: ClusterParams, progress: Progress, timeout_s: float) -> DevctlError:
    missing, arrived, total = barrier
    if params.num_processes is not None and params.num_processes != total:
        return InputRejected(
            f"distributed: the coordinator (process 0) expects {total} processes, this process was given "
            f"--num-processes {params.num_processes}; {SAME_COUNT}"
        )
    named = ids(missing) if missing else "(JAX did not name them)"
    more = total - arrived - len(missing)
    if missing and more > 0:
        named += f" and {more} more"
    count = total - arrived
    message = (
        f"distributed: {count} of {total} {plural(range(total), 'process', 'processes')} never joined the cluster "
        f"within {timeout_s:g} s: missing process {'id' if count == 1 else 'ids'} {named}"
    )
    if _SAME_TASK_AGAIN in log:  # only process 0, which hosts the service, sees this
        return InputRejected(
            f"{message}, and two processes registered with the same process id (one id given twice leaves another unused); {_SAME_ID}"
        )
    return DevctlError(f"{message}; every process must run the same devctl command with --distributed{_loopback_hint(progress)}")


def _loopback_hint(progress: Progress) -> str:
    """Process 0 listened only on loopback because the coordinator's name resolves there (Debian's 127.0.1.1): say so."""
    listening = progress.listening or {}
    if not listening.get("loopback_only") or listening.get("loopback_literal"):
        return ""
    return (
        f" (the coordinator listened only on loopback: {listening.get('address')} resolves to a loopback address on this host, "
        f"which processes on other hosts cannot reach; give --coordinator an address they can reach, or set JAX_COORDINATOR_BIND_ADDRESS)"
    )


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
        f"({source(views.get(0) or {})}); {named}{more}; {SAME_COUNT}"
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


def ids(ids) -> str:
    return ", ".join(str(i) for i in ids)


def plural(items, one: str, many: str) -> str:
    return one if len(list(items)) == 1 else many
