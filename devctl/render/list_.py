"""`devctl list` as tables: devices by backend, backends that failed, accelerators JAX does not use."""

from __future__ import annotations

from itertools import groupby

from devctl.model.list_ import BackendStatus
from devctl.render.console import data_table, out
from devctl.units import format_bytes, format_seconds


def render_inventory(inv) -> None:
    console = out()
    header = f"jax {inv.jax_version or '?'}, jaxlib {inv.jaxlib_version or '?'}"
    if inv.default_platform:
        header += f"; default backend: {inv.default_platform}"
    console.print(header, markup=False)
    outcome = inv.jax_outcome
    if outcome is not None and outcome.fails:
        # Before any table: a program here gets no device, whatever each backend alone could do.
        console.print(f"jax.devices() {outcome.result}: {outcome.error or outcome.culprit or '?'}", markup=False)
        if outcome.code:
            console.print(f"{outcome.code}: {outcome.summary}", markup=False)
            console.print(f"fix: {outcome.fix}", markup=False)
    backends = {b.platform: b for b in inv.backends}
    devices = sorted(inv.devices, key=lambda d: (d.platform, d.process_index, d.id))
    for platform, grouped in groupby(devices, key=lambda d: d.platform):
        group = list(grouped)
        b = backends.get(platform) or (backends.get("cuda") or backends.get("rocm") if platform == "gpu" else None)
        title = f"{platform}: {len(group)} device(s)"
        if b is not None:
            title += f", {b.platform_version or ''}".rstrip(", ")
            if b.pjrt_c_api_version:
                title += f", PJRT C API {b.pjrt_c_api_version}"
            title += f", init {format_seconds(b.init_s)}"
        table = data_table(title=title)
        for col in ("id", "kind", "process", "hw id", "memory kinds", "memory limit", "details"):
            table.add_column(col, justify="right" if col in ("id", "process", "hw id", "memory limit") else "left")
        for d in group:
            stats = d.memory_stats or {}
            table.add_row(
                str(d.id),
                d.device_kind,
                str(d.process_index),
                "-" if d.local_hardware_id is None else str(d.local_hardware_id),
                ",".join(k if k != d.default_memory_kind else f"{k}*" for k in (d.memory_kinds or [])) or "-",
                format_bytes(stats.get("bytes_limit")),
                _details(d),
            )
        console.print(table)

    bad = [b for b in inv.backends if b.status is not BackendStatus.OK]
    if bad:
        table = data_table(title="backends not in use")
        for col in ("backend", "status", "reason", "what to do"):
            table.add_column(col, overflow="fold")
        for b in bad:
            # What is wrong in the machine's terms first; the library's own words stay in --json and doctor.
            table.add_row(b.platform, b.status.value, b.summary or b.error or "-", f"{b.hint} ({b.code})" if b.code else b.hint or "-")
        console.print(table)

    if inv.unused_accelerators:
        table = data_table(title="accelerators on this machine that JAX is not using")
        for col in ("kind", "name", "where", "why"):
            table.add_column(col, overflow="fold")
        for u in inv.unused_accelerators:
            table.add_row(u.kind, u.name, u.location, u.reason)
        console.print(table)
    if not inv.devices:
        console.print("JAX sees no device at all; run devctl doctor.", markup=False)


def _details(d) -> str:
    parts = []
    a = d.attributes
    if "coords" in a:
        parts.append(f"coords {tuple(a['coords'])}")
    if "core_on_chip" in a:
        parts.append(f"core {a['core_on_chip']}")
    if "compute_capability" in a:
        parts.append(f"sm {a['compute_capability']}")
    if d.nvml_gpu:
        parts.append(f"nvml #{d.nvml_gpu['index']} {d.nvml_gpu['pci_bus_id']}")
    elif "pci_bus_id" in a:
        parts.append(str(a["pci_bus_id"]))
    if d.memory_stats is None:
        parts.append("memory_stats: not implemented")
    return ", ".join(parts) or "-"
