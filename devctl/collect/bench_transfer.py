"""`devctl bench transfer`: run the measuring child (devctl.probe.bench_transfer), assemble its events, compare with a baseline."""

from __future__ import annotations

from typing import Callable

from devctl.errors import InputRejected
from devctl.model import bench_transfer as m

PROBE_MODULE = "devctl.probe.bench_transfer"


def run_transfer(
    opts: m.TransferOptions,
    timeout_s: float,
    *,
    on_event: Callable[[dict], None] | None = None,
) -> m.TransferReport:
    """Run the probe child into a report; --sizes is checked when the plan arrives, before the child allocates anything."""
    from devctl.collect.bench import run_probe

    def each(event: dict) -> None:
        if on_event is not None:
            on_event(event)
        if event.get("event") == "plan":
            check_sizes_fit(opts, event)  # what it raises ends the child and reaches the caller

    result = run_probe(PROBE_MODULE, opts.to_request(), timeout_s, "bench transfer", each)
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.TransferReport:
    from devctl.collect.bench import devices_of, environment_of
    from devctl.model import from_dict

    done = next(e for e in reversed(events) if e.get("event") == "done")
    cells = tuple(from_dict(m.Cell, e) for e in events if e.get("event") == "cell")
    memcpy = tuple(from_dict(m.MemcpyRoof, e) for e in events if e.get("event") == "roof")
    pcie = tuple(from_dict(m.PcieLink, link) for link in done.get("pcie", []))
    return m.TransferReport(
        results=cells,
        roofs=m.Roofs(host_memcpy=memcpy, pcie=pcie, pcie_reason=done.get("pcie_reason")),
        fastest=m.fastest_paths(cells),
        devices=devices_of(events),
        environment=environment_of(events, elapsed_s),
    )


def check_sizes_fit(opts: m.TransferOptions, plan: dict) -> None:
    """A size this machine can never hold is bad input (exit 2), not a run of skipped cells that exits 0."""
    from devctl.units import format_bytes, format_size_short

    if opts.sizes_bytes is None:
        return  # the default sweep: the probe itself leaves out what does not fit, and says so
    devices = [d for d in plan.get("devices") or [] if isinstance(d, dict)]
    in_host = any(d.get("platform") == "cpu" for d in devices)
    # As the child plans it: the default measures pinned where a device has a pinned path of its own (a
    # superset of the targets, so the estimate errs high, never low).
    pinned = any(m.pinned_is_a_path(str(d.get("platform")), d.get("memory_kinds") or ()) for d in devices)
    from devctl.discovery.host import host_memory_limit

    limit, what = host_memory_limit()
    for size in opts.sizes_bytes:
        need = m.host_bytes_needed(
            opts, size, devices_in_host_memory=in_host, device_count=max(len(devices), 1), pinned_path=pinned
        )
        if limit is not None and need > limit:
            copies = need // size
            largest = _largest_fitting(limit // copies)
            raise InputRejected(
                f"--sizes {format_size_short(size)} needs about {format_bytes(need)} of host memory for this run "
                f"({copies}x the size at its peak), more than {what} ({format_bytes(limit)}); "
                f"give sizes up to {largest}"
            )
        for d in devices:
            share = size // len(devices) if opts.layouts == ("sharded",) else size
            cap = d.get("bytes_limit")
            if isinstance(cap, int) and cap > 0 and share > cap:
                raise InputRejected(
                    f"--sizes {format_size_short(size)} does not fit in {d.get('name')}: its bytes_limit is {format_bytes(cap)}"
                )


def _largest_fitting(n: int) -> str:
    from devctl.units import format_size_short

    power = 1 << max(n.bit_length() - 1, 0)  # the largest power of two that fits: the sizes people pass
    return format_size_short(power)
