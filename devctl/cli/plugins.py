"""`devctl plugins`: JAX plugins and PJRT_NAMES_AND_LIBRARY_PATHS entries, each library probed without initializing it."""

from __future__ import annotations

from devctl.cli.options import JsonOpt, TimeoutOpt, check_timeout

SCHEMA = "devctl.plugins/1"


def plugins(json_out: JsonOpt = False, timeout: TimeoutOpt = None) -> None:
    """List JAX plugins and PJRT_NAMES_AND_LIBRARY_PATHS entries with their PJRT API versions."""
    timeout_s = check_timeout(timeout)

    from devctl.collect.plugins import plugins_report

    reports = plugins_report(timeout_s=timeout_s)
    if json_out:
        from devctl.model import to_jsonable
        from devctl.render.console import print_json

        print_json({"schema": SCHEMA, "plugins": to_jsonable(reports)})
    else:
        from devctl.render.plugins import render_plugins

        render_plugins(reports)
