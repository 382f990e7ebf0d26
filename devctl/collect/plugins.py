"""`devctl plugins`: every plugin JAX would consider, each library probed without being initialized,
beside jaxlib's own PJRT C API version and its plugin check's verdict."""

from __future__ import annotations

import os
from collections.abc import Mapping

from devctl.model.plugins import SCHEMA, FrameworkPjrt, PjrtLibraryInfo, PluginEntry, PluginReport, PluginsReport, PluginStatus

DEFAULT_TIMEOUT_S = 20.0


def collect_plugins(timeout_s: float = DEFAULT_TIMEOUT_S) -> PluginsReport:
    """`devctl plugins`'s report."""
    return PluginsReport(SCHEMA, plugins_report(timeout_s))


def plugins_report(
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    environ: Mapping[str, str] | None = None,
    introspect: bool = True,
) -> list[PluginReport]:
    """Every plugin JAX would consider, each library probed in its own child process."""
    from devctl.discovery.plugins import ENV_VAR, find_plugin_packages, parse_pjrt_env

    environ = os.environ if environ is None else environ
    entries = find_plugin_packages(environ=environ) + parse_pjrt_env(environ.get(ENV_VAR))
    return judged(entries, timeout_s, introspect=introspect)


def judged(entries: list[PluginEntry], timeout_s: float, *, introspect: bool = True) -> list[PluginReport]:
    """Each entry beside what its library reports and what jaxlib's plugin check says of it."""
    infos, framework = probe_libraries([e.library_path for e in entries if e.status is PluginStatus.OK and e.library_path], timeout_s) if introspect else ({}, None)
    return [PluginReport.from_parts(e, infos.get(e.library_path or ""), framework) for e in entries]


def probe_libraries(paths: list[str], timeout_s: float) -> tuple[dict[str, PjrtLibraryInfo], FrameworkPjrt | None]:
    """The libraries (dlopen + GetPjrtApi, never initialized) and jaxlib's own PJRT C API version and rule,
    asked at once, each in a child process. Nothing to ask without a library."""
    if not paths:
        return {}, None
    from concurrent.futures import ThreadPoolExecutor

    from devctl.probe.framework_pjrt import framework_pjrt
    from devctl.probe.pjrt_library import introspect_libraries

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(framework_pjrt, timeout_s)
        infos = introspect_libraries(paths, timeout_s)
        return infos, pending.result()
