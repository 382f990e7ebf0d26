"""The one output switch: every command hands its finished report to emit(), which prints its table, its
JSON document or its CSV.

CSV is a table as data, for spreadsheets and logs (as amd-smi and nvidia-smi users expect): the render
module that prints a report's table may define `csv_rows(report) -> (header, rows)`, one row per line of
its main table, raw values (bytes, seconds, GB/s as numbers; no units, no bars); emit writes it with the
csv module. A report whose module has no csv_rows has no --csv.
"""

from __future__ import annotations

import importlib
from typing import Any

# A report's schema id -> (module under devctl.render, the function that prints its table). Every report
# carries its schema id, so the id says which table it is; the module is imported only when a table is asked for.
TABLES: dict[str, tuple[str, str]] = {
    "devctl.list/1": ("list_", "render_inventory"),
    "devctl.list.distributed/2": ("distributed", "render_cluster"),
    "devctl.memstats/2": ("memstats", "render_snapshot"),
    "devctl.memstats.distributed/2": ("distributed", "render_cluster"),
    "devctl.memstats.top/1": ("holders", "render_top"),
    "devctl.memstats.top.distributed/1": ("holders", "render_fleet"),
    "devctl.memstats.postmortems/1": ("holders", "render_postmortems"),
    "devctl.plugins/1": ("plugins", "render_plugins"),
    "devctl.env/1": ("env", "render_environment"),
    "devctl.check/1": ("check", "render_check"),
    "devctl.doctor/1": ("doctor", "render_doctor"),
    "devctl.bench.transfer/2": ("bench_transfer", "transfer_text"),
    "devctl.bench.memory/2": ("bench_memory", "memory_text"),
    "devctl.bench.matmul/2": ("bench_matmul", "matmul_text"),
    "devctl.bench.collective/2": ("bench_collective", "collective_text"),
}


def emit(report: Any, json_out: bool, *, csv_out: bool = False, verbose: bool = False) -> None:
    """Print one command's report on stdout: its JSON document, its CSV, or its table (with `verbose`, the table
    view's longer form: a bench's method)."""
    if json_out:
        from devctl.render.console import print_json

        print_json(json_document(report))
        return
    module, function = TABLES[report.schema]
    renderer = importlib.import_module(f"devctl.render.{module}")
    if csv_out:
        header, rows = renderer.csv_rows(report)
        write_csv(header, rows)
        return
    getattr(renderer, function)(report, **({"verbose": True} if verbose else {}))


def has_csv(schema: str) -> bool:
    """Whether the report with this schema id can be printed as CSV (its render module has csv_rows)."""
    return hasattr(importlib.import_module(f"devctl.render.{TABLES[schema][0]}"), "csv_rows")


def write_csv(header: list[str] | None, rows: list[list[Any]]) -> None:
    """RFC 4180 CSV on stdout: a header line when given, then the rows; None is an empty field. Cells pass
    through printable() like every table cell, so a job's command line cannot forge a line."""
    import csv
    import io

    from devctl.render.console import write_stdout
    from devctl.text import printable

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header is not None:
        writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else printable(v) if isinstance(v, str) else v for v in row])
    write_stdout(buffer.getvalue())


def json_document(report: Any) -> dict:
    """The report as its --json document: every field, the schema id first so `head` and people see what it is."""
    from devctl.model import to_jsonable

    document = to_jsonable(report)
    return {"schema": document.pop("schema"), **document}
