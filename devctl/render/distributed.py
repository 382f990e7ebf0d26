"""A JAX cluster as tables: hosts, devices under their process, the odd ones out, and the smallest memory headroom.

Narrow terminals: host names are never cut (dgx-h100-07 and dgx-h100-08 must stay apart); what every host
or device shares (the device kind, the memory limit, an empty libtpu column) becomes one line above its
table, and the process index gives way in the device table, where host and device name the row.
"""

from __future__ import annotations

from devctl.model.distributed import LIST_SCHEMA
from devctl.render.console import Column, print_table, say
from devctl.units import format_bytes


def render_cluster(report) -> None:
    total = len([d for d in report.devices if d.id is not None])
    coordinator = f", coordinator {report.coordinator}" if report.coordinator else ""
    say(f"cluster: {report.num_processes} process(es){coordinator}; {total} JAX device(s)", hang="  ")

    columns = [
        Column("process", "right"), Column("host"), Column("devices", "right", priority=2), Column("kind", priority=3),
        Column("jax", priority=1), Column("jaxlib", priority=1), Column("libtpu", priority=4), Column("driver", priority=2),
    ]  # fmt: skip
    rows = [
        [str(p.process_index), p.hostname, str(p.device_count), ", ".join(p.device_kinds) or "-",
         p.jax_version or "-", p.jaxlib_version or "-", p.libtpu_version or "-", p.driver_version or "-"]
        for p in report.processes
    ]  # fmt: skip
    print_table(columns, rows, title="hosts")

    columns = [
        Column("process", "right", priority=4, detail=False), Column("host"), Column("device"), Column("kind", priority=3),
        Column("memory limit", "right", priority=2, short="limit"), Column("peak in use", "right", priority=1, short="peak"),
        Column("usable", "right"),
    ]  # fmt: skip
    rows = [
        [str(d.process_index), d.hostname, d.key, d.device_kind,
         format_bytes(d.bytes_limit), format_bytes(d.peak_bytes_in_use), format_bytes(d.usable_bytes)]
        for d in report.devices
    ]  # fmt: skip
    if report.schema == LIST_SCHEMA:  # the publishing jobs' peaks are memstats'; list has none to show
        columns.pop(5)
        for row in rows:
            row.pop(5)
    print_table(columns, rows, title="devices")

    if report.findings:
        say("processes that differ:")
        for f in report.findings:
            say(f"{f.severity}: {f.message}" + (f" ({f.hint})" if f.hint else ""), indent="  ", hang="    ")
    else:
        say("every process has the same versions, device kind and device count")
    say(_headroom_line(report.headroom), hang="  ")


def _headroom_line(h) -> str:
    if h.min_bytes is None:
        return f"smallest memory headroom: unknown ({h.reason})"
    return f"smallest memory headroom: {format_bytes(h.min_bytes)} on {h.where} of {h.hostname} (process {h.process_index})"


def csv_rows(report) -> tuple[list[str], list[list]]:
    """One row per device of every process (the devices table), raw values: bytes as integers."""
    header = [
        "process_index", "hostname", "device", "platform", "id", "kind", "jax_process_index",
        "bytes_limit", "peak_bytes_in_use", "usable_bytes",
    ]  # fmt: skip
    rows = [
        [d.process_index, d.hostname, d.key, d.platform, d.id, d.device_kind, d.jax_process_index,
         d.bytes_limit, d.peak_bytes_in_use, d.usable_bytes]
        for d in report.devices
    ]  # fmt: skip
    return header, rows
