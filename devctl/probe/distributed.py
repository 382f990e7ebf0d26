"""Join a JAX cluster in a child process and exchange one JSON report per process through JAX's own key-value store: the parent side.

`exchange` (no jax import here) starts the child, sends it this process's
report (or builds the report from the child's local backend probe), follows
its events, and turns every way the cluster can fail into one line naming
the processes at fault (devctl.probe.distributed_failures).

The child is `python -m devctl.probe.distributed -` (this module's name is
what `devctl` prestarts): it runs devctl.probe.distributed_child, which joins
through devctl.probe.distributed_runtime's bounded wrappers of JAX's runtime
and watches its peers with devctl.probe.distributed_liveness.

JAX aborts the whole process (absl FATAL) when a peer never registers or the
service goes away, which is why this runs in a child under the watchdog, with
its output kept in a file the parent reads to name the missing processes.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from devctl.errors import DevctlError, InputRejected
from devctl.model.distributed import ClusterParams, Joined
from devctl.probe.distributed_failures import crash_error, missing_message

MODULE = "devctl.probe.distributed"
_LOG_NAME = "child.log"
# Parent watchdog over the child: every phase of the child is bounded by --timeout plus the
# margins of distributed_runtime and distributed_child, and the child sends an event when it
# enters each phase.
_WATCHDOG_MARGIN_S = 8


@dataclass(frozen=True)
class Exchanged:
    joined: Joined
    reports: list[Any] | None  # every process's report in process order; None where this process prints nothing
    join_s: float | None = None  # from asking to join to joined: mostly waiting for the last process to start
    gather_s: float | None = None  # from sharing this process's report to the verdict: waiting for the slowest report


@dataclass
class Progress:
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
    build_report: Callable[[dict, Joined, Progress], Any] | None = None,
) -> Exchanged:
    """Join the cluster, share this process's JSON-able report, and get every report on process 0.

    The report is `report`, given up front; or `make_report()`, called here
    while the child imports jax and joins; or, with `probe` ({"platforms",
    "memory_stats"}), the child initializes the backends after joining (on a
    multi-host TPU slice they can only be initialized then) and
    `build_report(local_probe, joined, progress)` makes the report from what
    it found.

    Raises InputRejected when JAX rejects the cluster parameters, DevctlError when
    a process never joined or sent no report (named), or this process failed.
    """
    from devctl.probe.runner import (
        collect,
        end_child,
        owned_tempdir,
        start_child,
        take_prestarted,
    )

    progress = Progress()
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
                assert progress.joined is not None  # the child says "joined" before it probes, and _track read it
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


def _track(event: dict, progress: Progress) -> None:
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


def _outcome(result, progress: Progress, log: str, params: ClusterParams, timeout_s: float, all_print: bool) -> Exchanged:
    gathered = result.last("gathered")
    if gathered is not None:
        # What happens after the verdict (leaving, shutdown) cannot change it: an abort there is ignored.
        joined = progress.joined or Joined(gathered["process_index"], gathered["num_processes"], params.coordinator)
        missing = gathered.get("missing") or []
        prints = joined.process_index == 0 or all_print
        if missing:  # every process fails, not only the one that prints: a scheduler reads each one's exit code
            raise DevctlError(missing_message(missing, gathered.get("dead") or [], joined, timeout_s))
        marks = progress.marks
        join_s = marks["joined"] - marks["join"] if "join" in marks and "joined" in marks else None
        gather_s = marks["gathered"] - marks["gather"] if "gather" in marks and "gathered" in marks else None
        return Exchanged(joined, gathered.get("reports") if prints else None, join_s, gather_s)
    error = result.last("error")
    if error is not None:
        cls = InputRejected if error.get("kind") == "usage" else DevctlError
        raise cls(error.get("message") or "distributed: the cluster probe failed")
    raise crash_error(result, progress, log, params, timeout_s)


if __name__ == "__main__":
    # `python -m devctl.probe.distributed -` is the child (this name is what `devctl` prestarts). Its code lives in
    # distributed_child, which never imports this module: run as __main__, it would be loaded a second time.
    from devctl.probe.distributed_child import main

    main()
