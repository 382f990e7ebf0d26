"""The one output switch: every command hands its finished report to emit(), which prints its table, its
JSON document or its CSV.

CSV is a table as data, for spreadsheets and logs (as amd-smi and nvidia-smi users expect): the render
module that prints a report's table may define `csv_rows(report) -> (header, rows)`, one row per line of
its main table, raw values (bytes, seconds, GB/s as numbers; no units, no bars); emit writes it with the
csv module. A report whose module has no csv_rows has no --csv.

Everything printed here (a document, a stream's record, CSV) is written whole or is an error: a record larger
than MAX_RECORD_BYTES is refused before a byte of it is written, and a write that fails (a full disk, a
closed terminal) ends devctl with one error line and exit 1, never a cut record and exit 0. A reader that went
away (`| head`) still ends it quietly: the reader chose to stop.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from devctl.errors import DevctlError

# The most one document or one stream record may hold. What devctl reports is bounded where it is read (a
# command line is cut to what a person reads, each snapshot and each refresh has a byte budget): a memstats
# document of 1024-device jobs filling the refresh's budget is a few hundred MiB at worst. Past this, something
# unbounded got through: refused whole rather than printed for minutes, or cut by a write past 2 GiB.
MAX_RECORD_BYTES = 512 << 20
_CHUNK_CHARS = 1 << 20  # one write(2) never carries more; Linux's caps at 2 GiB - 4 KiB and returns short


class OutputFailed(DevctlError):
    """stdout could not take the output whole: it is incomplete, and devctl says so (exit 1)."""

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
        write_record(json.dumps(json_document(report), indent=2, default=str) + "\n", "the JSON document")
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

    from devctl.text import printable

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header is not None:
        writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else printable(v) if isinstance(v, str) else v for v in row])
    write_record(buffer.getvalue(), "the CSV rows")


def emit_json_line(document: dict) -> None:
    """One JSON Lines record of a stream (`--watch --json`) on stdout, whole and flushed for `| jq`."""
    write_record(json.dumps(document, separators=(",", ":"), default=str) + "\n", "a JSON Lines record")


def write_record(text: str, what: str) -> None:
    """`text` on stdout, all of it, flushed; OutputFailed when it is larger than MAX_RECORD_BYTES (nothing is
    written) or stdout fails part-way (what was written stays, and the error says it is incomplete)."""
    if len(text) > MAX_RECORD_BYTES:  # characters; JSON and CSV here are mostly ASCII, so about bytes
        raise OutputFailed(f"{what} would be {len(text):,} characters, more than the {MAX_RECORD_BYTES:,} devctl writes as one record; nothing was written")
    try:
        for start in range(0, len(text), _CHUNK_CHARS):
            sys.stdout.write(text[start : start + _CHUNK_CHARS])
        sys.stdout.flush()
    except BrokenPipeError:
        from devctl.render.console import reader_gone

        reader_gone()
    except OSError as e:
        _discard_stdout()
        raise OutputFailed(f"cannot write {what} to stdout: {e.strerror or e}; the output is incomplete") from None


def _discard_stdout() -> None:
    """Point stdout at /dev/null: what is still buffered would fail again at exit, as a second, rawer message."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


def json_document(report: Any) -> dict:
    """The report as its --json document: every field, the schema id first so `head` and people see what it is."""
    from devctl.model import to_jsonable

    document = to_jsonable(report)
    return {"schema": document.pop("schema"), **document}
