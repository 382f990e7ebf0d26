"""The cluster options (--distributed, --coordinator, --num-processes, --process-id, --all-print): declared
once, for every command that runs across a JAX cluster, and parsed once into model.distributed.ClusterParams.

A command takes them with `@cluster_options`: typer sees the five options (after the command's own), and the
command is called with `cluster` (ClusterParams, or None without --distributed) and `all_print` instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from devctl.cli.options import option_group
from devctl.errors import UsageError
from devctl.model.distributed import ClusterParams

_PANEL = "Cluster (--distributed)"
# Numbers are strings parsed here, not by typer, so that a bad value gets a one-line error that names it.
OPTIONS: dict[str, tuple[Any, Any]] = {
    "distributed": (
        Annotated[
            bool,
            typer.Option(
                "--distributed",
                help="Run on every process of a JAX cluster (jax.distributed); process 0 prints the whole cluster. "
                "--timeout then also bounds joining and gathering.",
                rich_help_panel=_PANEL,
            ),
        ],
        False,
    ),
    "coordinator": (
        Annotated[
            Optional[str],
            typer.Option("--coordinator", metavar="HOST:PORT", help="Process 0's address (default: what JAX auto-detects).", rich_help_panel=_PANEL),
        ],
        None,
    ),
    "num_processes": (
        Annotated[
            Optional[str],
            typer.Option("--num-processes", metavar="N", help="Number of processes in the cluster (default: auto-detected).", rich_help_panel=_PANEL),
        ],
        None,
    ),
    "process_id": (
        Annotated[
            Optional[str],
            typer.Option("--process-id", metavar="I", help="This process's index, 0 to N-1 (default: auto-detected).", rich_help_panel=_PANEL),
        ],
        None,
    ),
    "all_print": (
        Annotated[bool, typer.Option("--all-print", help="Every process prints the cluster result, not only process 0.", rich_help_panel=_PANEL)],
        False,
    ),
}


def cluster_from_flags(
    distributed: bool, coordinator: str | None, num_processes: str | None, process_id: str | None, all_print: bool
) -> ClusterParams | None:
    """None when no cluster flag was given; else the validated cluster (a cluster flag without --distributed is bad input)."""
    # `is None`, not falsiness: `--coordinator ''` was given, and is bad input, not absent.
    if not distributed and not all_print and coordinator is None and num_processes is None and process_id is None:
        return None
    check_cluster_flags(distributed, coordinator=coordinator, num_processes=num_processes, process_id=process_id, all_print=all_print)
    return cluster_params(coordinator, num_processes, process_id)


def cluster_params(coordinator: str | None, num_processes: str | None, process_id: str | None) -> ClusterParams:
    """Validated --coordinator/--num-processes/--process-id; what is left out, JAX auto-detects."""
    coord = check_coordinator(coordinator) if coordinator is not None else None
    n = _whole(num_processes, "--num-processes", minimum=1)
    i = _whole(process_id, "--process-id", minimum=0)
    if n is not None and i is not None and i >= n:
        raise UsageError(f"--process-id {i} is out of range for --num-processes {n}: use 0 to {n - 1}")
    return ClusterParams(coord, n, i)


def check_cluster_flags(distributed: bool, **flags: Any) -> None:
    """Cluster flags mean nothing without --distributed: say so rather than ignore them."""
    if distributed:
        return
    for name, value in flags.items():
        if value not in (None, False):
            raise UsageError(f"--{name.replace('_', '-')} needs --distributed")


def check_coordinator(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host_ok = len(host) > 2  # [IPv6]:port
    else:
        host_ok = bool(host) and ":" not in host and " " not in host
    if not sep or not host_ok:
        raise UsageError(f"--coordinator must be HOST:PORT (e.g. 10.0.0.1:8476 or [fe80::1]:8476), got {text!r}")
    if not _digits(port, 5) or not 1 <= int(port) <= 65535:
        raise UsageError(f"--coordinator port must be a number from 1 to 65535, got {port!r} in {text!r}")
    return f"{host}:{int(port)}"


def _whole(text: str | None, flag: str, minimum: int) -> int | None:
    if text is None:
        return None
    value = text.strip()
    if not _digits(value, 9) or int(value) < minimum:
        raise UsageError(f"{flag} must be a whole number of at least {minimum}, got {text!r}")
    return int(value)


def _digits(text: str, most: int) -> bool:
    """ASCII digits, and few: str.isdigit() accepts '²', which int() refuses, and int() of 5000 digits raises."""
    return text.isascii() and text.isdigit() and len(text) <= most


# `@cluster_options`: the five options after the command's own; the command gets `cluster` and `all_print`.
cluster_options = option_group(
    OPTIONS, ("cluster", "all_print"), lambda **flags: {"cluster": cluster_from_flags(**flags), "all_print": flags["all_print"]}
)
