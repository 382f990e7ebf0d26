"""A JAX cluster as tables: hosts, devices under their process, the odd ones out, and the smallest memory headroom."""

from __future__ import annotations

from devctl.render.console import data_table, out
from devctl.units import format_bytes


def render_cluster(report) -> None:
    console = out()
    total = len([d for d in report.devices if d.id is not None])
    coordinator = f", coordinator {report.coordinator}" if report.coordinator else ""
    console.print(f"cluster: {report.num_processes} process(es){coordinator}; {total} JAX device(s)", markup=False)

    hosts = data_table(title="hosts")
    for col in ("process", "host", "devices", "kind", "jax", "jaxlib", "libtpu", "driver"):
        hosts.add_column(col, justify="right" if col in ("process", "devices") else "left")
    for p in report.processes:
        hosts.add_row(
            str(p.process_index), p.hostname, str(p.device_count), ", ".join(p.device_kinds) or "-",
            p.jax_version or "-", p.jaxlib_version or "-", p.libtpu_version or "-", p.driver_version or "-",
        )  # fmt: skip
    console.print(hosts)

    devices = data_table(title="devices")
    for col in ("process", "host", "device", "kind", "memory limit", "peak in use", "headroom"):
        devices.add_column(col, justify="left" if col in ("host", "device", "kind") else "right")
    for d in report.devices:
        devices.add_row(
            str(d.process_index), d.hostname, d.key, d.device_kind,
            format_bytes(d.bytes_limit), format_bytes(d.peak_bytes_in_use), format_bytes(d.headroom_bytes),
        )  # fmt: skip
    console.print(devices)

    if report.findings:
        console.print("processes that differ:", markup=False)
        for f in report.findings:
            console.print(f"  {f.severity}: {f.message}" + (f" ({f.hint})" if f.hint else ""), markup=False)
    else:
        console.print("every process has the same versions, device kind and device count", markup=False)
    console.print(_headroom_line(report.headroom), markup=False)


def _headroom_line(h) -> str:
    if h.min_bytes is None:
        return f"smallest memory headroom: unknown ({h.reason})"
    return f"smallest memory headroom: {format_bytes(h.min_bytes)} on {h.where} of {h.hostname} (process {h.process_index})"
