"""`devctl bench transfer`: run the measuring child (devctl.probe.transfer) and assemble its events."""

from __future__ import annotations

from typing import Callable

from devctl.errors import DevctlError, UsageError
from devctl.model import bench as m

PROBE_MODULE = "devctl.probe.transfer"


def run_transfer(
    opts: m.TransferOptions,
    timeout_s: float,
    *,
    on_event: Callable[[dict], None] | None = None,
    check_plan: Callable[[dict], None] | None = None,
) -> m.TransferReport:
    """Run the probe child and assemble its events into a report. `on_event` sees every event as it comes
    (progress); `check_plan` sees the plan, the first moment the devices are known and before the child
    allocates anything: what it raises ends the child and reaches the caller."""
    from devctl.probe.runner import run_child

    def each(event: dict) -> None:
        if on_event is not None:
            on_event(event)
        if check_plan is not None and event.get("event") == "plan":
            check_plan(event)

    result = run_child(PROBE_MODULE, opts.to_request(), timeout_s=timeout_s, on_event=each)
    error = result.last("error")
    if error is not None:
        if error.get("kind") == "usage":
            raise UsageError(error.get("message", "bad input"))
        raise DevctlError(f"bench transfer: {error.get('message', 'the probe failed')}")
    done = result.last("done")
    plan = result.last("plan")
    if done is None or plan is None:
        raise DevctlError(f"bench transfer: the benchmark process {result.failure_text()}")
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.TransferReport:
    from devctl import __version__

    plan = next(e for e in events if e.get("event") == "plan")
    done = next(e for e in reversed(events) if e.get("event") == "done")
    cells = tuple(m.cell_from_dict(e) for e in events if e.get("event") == "cell")
    memcpy = tuple(
        m.MemcpyRoof(e["size_bytes"], e["samples"], e["median_s"], e["gbps"], e.get("note"))
        for e in events
        if e.get("event") == "roof"
    )
    pcie = tuple(m.PcieLink(**link) for link in done.get("pcie", []))
    devices = tuple(m.DeviceInfo(**{**d, "memory_kinds": tuple(d.get("memory_kinds", ()))}) for d in plan["devices"])
    environment = {**plan.get("environment", {}), "devctl": __version__, "child_elapsed_s": done.get("elapsed_s")}
    if elapsed_s is not None:
        environment["elapsed_s"] = round(elapsed_s, 3)
    return m.TransferReport(
        results=cells,
        roofs=m.Roofs(host_memcpy=memcpy, pcie=pcie, pcie_reason=done.get("pcie_reason")),
        fastest=m.fastest_paths(cells),
        devices=devices,
        environment=environment,
    )
