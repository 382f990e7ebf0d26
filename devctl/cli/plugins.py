"""`devctl plugins`: JAX plugins and PJRT_NAMES_AND_LIBRARY_PATHS entries, each library probed without initializing it."""

from __future__ import annotations

from devctl.cli.options import JsonOpt, TimeoutOpt, check_timeout


def plugins(json_out: JsonOpt = False, timeout: TimeoutOpt = None) -> None:
    """List JAX plugins and PJRT_NAMES_AND_LIBRARY_PATHS entries with their PJRT API versions."""
    timeout_s = check_timeout(timeout)

    from devctl.collect.plugins import collect_plugins
    from devctl.render import emit

    emit(collect_plugins(timeout_s), json_out)
