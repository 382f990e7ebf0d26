"""Options shared by several commands, and their validation."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from devctl.errors import UsageError


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
# Parsed by check_timeout, not typer, so a bad value is named in the error.
TimeoutOpt = Annotated[
    Optional[str],
    typer.Option("--timeout", metavar="SECONDS", envvar="DEVCTL_TIMEOUT", help="Bound on each backend's initialization (default 30, at most 60)."),
]
HostRootOpt = Annotated[
    str,
    typer.Option(
        "--host-root",
        metavar="PATH",
        help="Read sysfs, /dev and /proc under PATH (a host's / mounted into a container).",
    ),
]
PlatformOpt = Annotated[
    Optional[list[str]],
    typer.Option("--platform", "-p", metavar="NAME", help="Only this JAX platform (repeatable): cpu, cuda, rocm, tpu, gpu or a plugin's name."),
]

# Cluster options (--distributed). Numbers are parsed by devctl.distributed.cluster_params, not typer,
# so a bad value gets a one-line error that names it.
_CLUSTER = "Cluster (--distributed)"
DistributedOpt = Annotated[
    bool,
    typer.Option(
        "--distributed",
        help="Run on every process of a JAX cluster (jax.distributed); process 0 prints the whole cluster. "
        "--timeout then also bounds joining and gathering.",
        rich_help_panel=_CLUSTER,
    ),
]
CoordinatorOpt = Annotated[
    Optional[str],
    typer.Option("--coordinator", metavar="HOST:PORT", help="Process 0's address (default: what JAX auto-detects).", rich_help_panel=_CLUSTER),
]
NumProcessesOpt = Annotated[
    Optional[str],
    typer.Option("--num-processes", metavar="N", help="Number of processes in the cluster (default: auto-detected).", rich_help_panel=_CLUSTER),
]
ProcessIdOpt = Annotated[
    Optional[str],
    typer.Option("--process-id", metavar="I", help="This process's index, 0 to N-1 (default: auto-detected).", rich_help_panel=_CLUSTER),
]
AllPrintOpt = Annotated[
    bool,
    typer.Option("--all-print", help="Every process prints the cluster result, not only process 0.", rich_help_panel=_CLUSTER),
]


def check_host_root(path: str) -> str:
    import os

    if not os.path.isdir(path):
        raise UsageError(f"--host-root {path!r} is not a directory")
    if not any(os.path.isdir(os.path.join(path, d)) for d in ("sys", "proc", "dev")):
        raise UsageError(f"--host-root {path!r} has no sys, proc or dev directory: point it at a host's / (e.g. /host)")
    return path


def check_timeout(text: str | None) -> float:
    """The --timeout every command takes (the probe runner owns its bounds); imported late to keep --help light."""
    from devctl.probe.runner import check_timeout as parse

    return parse(text)
