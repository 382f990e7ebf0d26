"""`devctl plugins` as a table."""

from __future__ import annotations

from devctl.model.plugins import PluginsReport
from devctl.render.console import Column, print_table, say


def render_plugins(report: PluginsReport) -> None:
    plugins = report.plugins
    if not plugins:
        say("No JAX plugins installed and PJRT_NAMES_AND_LIBRARY_PATHS is not set: JAX has its built-in CPU backend only.")
        return
    print_table(COLUMNS, [_row(p) for p in plugins])  # cells become plain, printable text there
    for p in plugins:
        for note in p.notes:
            say(f"{p.name}: {note}", hang=" " * (len(p.name) + 2))


# At 80 columns a plugin's row keeps its name, status, package and PJRT C API versions; its library path,
# jaxlib's verdict, attributes and error go on lines of their own under it (a path breaks after a '/').
COLUMNS = [
    Column("name"), Column("status"), Column("source", priority=4), Column("package", priority=1),
    Column("PJRT API", priority=2), Column("jaxlib's PJRT API", priority=3, short="jaxlib's"),
    Column("library", priority=5), Column("jaxlib's check", priority=6), Column("attributes", priority=7),
    Column("error", priority=8),
]  # fmt: skip


def _row(p) -> list[str]:
    package = f"{p.distribution} {p.distribution_version or ''}".strip() if p.distribution else "-"
    attrs = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(p.attributes.items())) or "-"
    return [p.name, p.status.value, p.source.value, package, str(p.pjrt_api_version or "-"),
            str(p.framework_pjrt_api_version or "-"), p.library_path or "-", _check(p), attrs, p.error or "-"]  # fmt: skip


def csv_rows(report: PluginsReport) -> tuple[list[str], list[list]]:
    """One row per plugin, raw values: versions as major.minor, attributes as `key=value` joined by '; '."""
    header = ["name", "status", "source", "distribution", "distribution_version", "module", "library_path",
              "pjrt_api_version", "framework_pjrt_api_version", "pjrt_accepted", "pjrt_check", "attributes", "error"]  # fmt: skip
    rows = [
        [p.name, p.status.value, p.source.value, p.distribution, p.distribution_version, p.module, p.library_path,
         None if p.pjrt_api_version is None else str(p.pjrt_api_version),
         None if p.framework_pjrt_api_version is None else str(p.framework_pjrt_api_version), p.pjrt_accepted, p.pjrt_check,
         "; ".join(f"{k}={_fmt(v)}" for k, v in sorted(p.attributes.items())), p.error]
        for p in report.plugins
    ]  # fmt: skip
    return header, rows


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
