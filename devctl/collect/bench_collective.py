"""`devctl bench collective`: run the measuring child (devctl.probe.bench_collective), assemble its events, set each
bus bandwidth against the device kind's published link peak, and name the slow links and hosts."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from devctl.errors import DevctlError
from devctl.model import bench_collective as m

PROBE_MODULE = "devctl.probe.bench_collective"
# With --distributed the child first joins the cluster (bounded by --timeout itself): the watchdog allows that too.
_JOIN_MARGIN_S = 10


def run_collective(opts: m.CollectiveOptions, timeout_s: float, *, on_event: Callable[[dict], None] | None = None) -> m.CollectiveReport:
    """Run the probe child and assemble its events into a report. `on_event` sees every event as it comes (progress)."""
    from devctl.collect.bench import run_probe

    def joined(result) -> None:
        if result.last("join_timeout") is not None or (opts.cluster is not None and result.last("joined") is None and result.last("plan") is None):
            raise DevctlError(
                f"bench collective: distributed: not every process joined the cluster within --timeout ({timeout_s:g} s): "
                "start the same command on every process, with the same --coordinator and --num-processes"
            )

    watchdog = timeout_s + (timeout_s + _JOIN_MARGIN_S if opts.cluster is not None else 0)
    result = run_probe(PROBE_MODULE, opts.to_request(), watchdog, "bench collective", on_event, check=joined)
    return assemble(result.events, elapsed_s=result.elapsed_s)


def assemble(events: list[dict], *, elapsed_s: float | None = None) -> m.CollectiveReport:
    from devctl.collect.bench import devices_of, environment_of
    from devctl.model import from_dict

    plan = next(e for e in events if e.get("event") == "plan")
    done = next(e for e in reversed(events) if e.get("event") == "done")
    devices = devices_of(events)
    axes = tuple(from_dict(m.MeshAxis, a) for a in plan["axes"])
    cells = tuple(from_dict(m.CollectiveCell, e) for e in events if e.get("event") == "cell")
    hosts_event = next((e for e in events if e.get("event") == "hosts"), None)
    hosts = tuple(from_dict(m.HostFigure, f) for f in (hosts_event or {}).get("figures", []))
    environment: m.CollectiveEnvironment = environment_of(events, elapsed_s, sweep_note=done.get("sweep_note"))
    cells, roof_note = with_roofs(cells, axes, devices)
    environment["roof_note"] = roof_note
    return m.CollectiveReport(
        results=cells,
        axes=axes,
        devices=devices,
        environment=environment,
        stragglers=tuple(link_stragglers(cells) + host_stragglers(hosts)),
        hosts=hosts,
    )


def link_roof_gbps(device_kind: str | None) -> float | None:
    """The most one device can send, one direction, over all its GPU-to-GPU links (NVLink, Infinity Fabric, ICI):
    the hardware bottleneck nccl-tests' busbw is meant to be set against (doc/PERFORMANCE.md, "Bus bandwidth").
    Published totals count both directions, hence the half."""
    from devctl.model.peaks import peak_for

    peak = peak_for(device_kind)
    if peak is None or peak.link_total_gbps is None:
        return None
    return peak.link_total_gbps / 2


def with_roofs(cells: tuple[m.CollectiveCell, ...], axes: tuple[m.MeshAxis, ...], devices) -> tuple[tuple[m.CollectiveCell, ...], str | None]:
    from devctl.model.peaks import no_peak_reason

    kinds = {d.device_kind for d in devices}
    kind = next(iter(kinds)) if len(kinds) == 1 else None
    platform = devices[0].platform if devices else None
    roof = link_roof_gbps(kind)
    inter = {a.name for a in axes if a.scope == "inter-host"}
    notes = []
    if roof is None:
        # Links and processes are compared by the straggler lines, not devices: the words for memory and matmul are not these.
        reason = no_peak_reason(kind, platform).removesuffix(": devices are compared with each other")
        notes.append(reason if len(kinds) <= 1 else "devices of several kinds: no one link peak applies")
    if inter and roof is not None:
        notes.append(f"axis {', '.join(sorted(inter))} crosses hosts: the network's peak is not known to devctl")
    if roof is None:
        return cells, "; ".join(notes)
    out = []
    for c in cells:
        if c.busbw_gbps is None or c.axis in inter:
            out.append(c)
            continue
        out.append(replace(c, roof_gbps=roof, pct_of_roof=100 * c.busbw_gbps / roof))
    return tuple(out), "; ".join(notes) or None


def link_stragglers(cells: tuple[m.CollectiveCell, ...]) -> list[m.StragglerFinding]:
    """Of every ordered pair of one axis (--all-pairs), the links slower than their peers."""
    from devctl.model.stragglers import find_stragglers

    groups: dict[tuple, dict[str, m.CollectiveCell]] = {}
    for c in cells:
        if c.collective == "ppermute-pair" and not c.skipped and c.algbw_gbps:
            groups.setdefault((c.axis, c.size_bytes, c.dtype), {})[f"{c.src}->{c.dst}"] = c
    found = []
    for (axis, size, _dtype), pairs in groups.items():
        for s in find_stragglers({name: c.algbw_gbps or 0.0 for name, c in pairs.items()}):
            found.append(m.StragglerFinding("link", s.name, "ppermute-pair", axis, size, s.value, s.median, s.deviation_pct, s.threshold_pct))
    return found


def host_stragglers(hosts: tuple[m.HostFigure, ...]) -> list[m.StragglerFinding]:
    """Of every process's own timing of one cell (--distributed), the processes slower than their peers."""
    from devctl.model.stragglers import find_stragglers

    groups: dict[tuple, dict[str, m.HostFigure]] = {}
    for h in hosts:
        if h.busbw_gbps:
            groups.setdefault((h.collective, h.axis, h.size_bytes, h.dtype), {})[f"process {h.process_index} ({h.hostname})"] = h
    found = []
    for (collective, axis, size, _dtype), figures in groups.items():
        for s in find_stragglers({name: h.busbw_gbps or 0.0 for name, h in figures.items()}):
            found.append(m.StragglerFinding("host", s.name, collective, axis, size, s.value, s.median, s.deviation_pct, s.threshold_pct))
    return found
