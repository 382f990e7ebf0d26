"""`devctl plugins` as a table."""

from __future__ import annotations

from devctl.model.plugins import PluginsReport
from devctl.render.console import data_table, out


def render_plugins(report: PluginsReport) -> None:
    plugins = report.plugins
    console = out()
    if not plugins:
        console.print("No JAX plugins installed and PJRT_NAMES_AND_LIBRARY_PATHS is not set: JAX has its built-in CPU backend only.", markup=False)
        return
    table = data_table()
    for col in ("name", "source", "package", "library", "PJRT API", "jaxlib's PJRT API", "jaxlib's check", "attributes", "status"):
        table.add_column(col, overflow="fold")
    for p in plugins:
        package = f"{p.distribution} {p.distribution_version or ''}".strip() if p.distribution else "-"
        attrs = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(p.attributes.items())) or "-"
        status = p.status.value + (f": {p.error}" if p.error else "")
        row = (p.name, p.source.value, package, p.library_path or "-", str(p.pjrt_api_version or "-"),
               str(p.framework_pjrt_api_version or "-"), _check(p), attrs, status)  # fmt: skip
        table.add_row(*row)  # data_table makes every cell plain, printable text
    console.print(table)
    for p in plugins:
        for note in p.notes:
            console.print(f"{p.name}: {note}", markup=False)


def _check(p) -> str:
    """jaxlib's plugin check on the library's PJRT C API version: its own words when it refuses."""
    accepted = p.pjrt_accepted
    if accepted is None:
        return "-" if p.pjrt_api_version is None else f"unknown: {p.pjrt_check or 'not asked'}"
    if accepted:
        return p.pjrt_check or "accepted"
    return f"refused: {p.pjrt_check}" if p.pjrt_check else "refused"


def _fmt(v) -> str:
    if isinstance(v, list):
        return ".".join(str(x) for x in v)
    return str(v)
