"""The one JSON-or-table switch: every command hands its finished report to emit()."""

from __future__ import annotations

import importlib
from typing import Any

# A report's schema id -> (module under devctl.render, the function that prints its table). Every report
# carries its schema id, so the id says which table it is; the module is imported only when a table is asked for.
TABLES: dict[str, tuple[str, str]] = {
    "devctl.list/1": ("list_", "render_inventory"),
    "devctl.list.distributed/1": ("distributed", "render_cluster"),
    "devctl.memstats/1": ("memstats", "render_snapshot"),
    "devctl.memstats.distributed/1": ("distributed", "render_cluster"),
    "devctl.plugins/1": ("plugins", "render_plugins"),
    "devctl.env/1": ("env", "render_environment"),
    "devctl.check/1": ("check", "render_check"),
    "devctl.doctor/1": ("doctor", "render_doctor"),
    "devctl.bench.transfer/1": ("bench", "transfer_text"),
}


def emit(report: Any, json_out: bool) -> None:
    """Print one command's report on stdout: its JSON document, or its table."""
    if json_out:
        from devctl.render.console import print_json

        print_json(json_document(report))
        return
    module, function = TABLES[report.schema]
    getattr(importlib.import_module(f"devctl.render.{module}"), function)(report)


def json_document(report: Any) -> dict:
    """The report as its --json document: every field, the schema id first so `head` and people see what it is."""
    from devctl.model import to_jsonable

    document = to_jsonable(report)
    return {"schema": document.pop("schema"), **document}
