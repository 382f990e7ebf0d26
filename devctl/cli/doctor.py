"""`devctl doctor`: why JAX does not see (or use well) the accelerators here, in plain words, with the fix."""

from __future__ import annotations

import typer

from devctl.cli.options import (
    HostRootOpt,
    JsonOpt,
    TimeoutOpt,
    check_host_root,
    check_timeout,
)


def doctor(
    json_out: JsonOpt = False,
    timeout: TimeoutOpt = None,
    host_root: HostRootOpt = "/",
) -> None:
    """Why JAX does not see or use an accelerator here, in plain words, and what to type.

    Shows what devctl sees, what JAX will use, and for each known failure found its evidence, cause and fix.
    Exit 0 when nothing is wrong, 1 when something is.
    """
    timeout_s = check_timeout(timeout)
    root = check_host_root(host_root)

    from devctl.collect.doctor import doctor as diagnose
    from devctl.render.check import progress

    with progress("examining this machine..."):
        report = diagnose(host_root=root, timeout_s=timeout_s)
    from devctl.render import emit

    emit(report, json_out)
    raise typer.Exit(report.exit_code)
