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

# Cluster options (--distributed). Numbers are parsed by devctl.collect.distributed.cluster_params, not typer,
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
    """The --timeout every command takes, in seconds (the probe runner owns its bounds)."""
    from devctl.probe.runner import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S

    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        timeout_s = float(text)
    except ValueError:
        timeout_s = float("nan")
    if not (0 < timeout_s <= MAX_TIMEOUT_S):  # NaN fails this too
        raise UsageError(f"--timeout (or DEVCTL_TIMEOUT) must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {quoted(text)}")
    return timeout_s


# ---- values and files given on the command line ------------------------------------------------------------


def shown(value: str, limit: int = 120) -> str:
    """A value as an error line quotes it: repr, and cut short, so a 100,000-character argument stays one readable line."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def quoted(value: object) -> str:
    """Any value from a file or flag as an error line quotes it: strings as shown() does, others as Python writes them."""
    if isinstance(value, str):
        return shown(value)
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:120]}... ({len(text)} characters)"


def split_list(flag: str, items: list[str] | None, example: str) -> list[str] | None:
    """The names of a repeatable, comma-separated option; None when it was not given.

    An empty value or entry ('', 'a,,b', 'a,') is an error, never "the default": a script whose
    variable came out empty must not silently run everything.
    """
    if items is None:
        return None
    names = []
    for item in items:
        parts = [p.strip() for p in item.split(",")]
        if not any(parts):
            raise UsageError(f"{flag} is empty; give {example}")
        if not all(parts):
            raise UsageError(f"{flag} {shown(item)} has an empty entry; give {example}")
        names += parts
    return names


# Files read for the user (a baseline, a config): far larger than any real one, small enough to read at once.
INPUT_CAP_BYTES = 16 << 20


def read_input_file(flag: str, path: str, cap: int = INPUT_CAP_BYTES) -> bytes:
    """The bytes of the regular file the user named; one-line UsageError for anything else.

    A link to a regular file is followed (the user named it); a FIFO, a device such as /dev/zero, a
    directory or a file over `cap` is refused before anything is read, so nothing blocks or fills memory.
    """
    from devctl.safefs import UnsafeFile, read_regular

    try:
        return read_regular(path, cap, follow_symlinks=True)
    except UnsafeFile as e:
        raise UsageError(f"{flag} {shown(path)} {e.strerror}; give a regular file of at most {cap >> 20} MiB") from None
    except FileNotFoundError:
        raise UsageError(f"{flag} {shown(path)}: no such file") from None
    except OSError as e:
        raise UsageError(f"{flag} {shown(path)} cannot be read: {e.strerror or e}") from None


def check_output_path(flag: str, path: str) -> None:
    """Refuse, before any work, a path that write_output could not replace with a regular file."""
    import os

    if not path:
        raise UsageError(f"{flag} is empty; give the path of a file to write")
    from devctl.safefs import check_writable

    directory = os.path.dirname(os.path.abspath(path))
    try:
        check_writable(path)  # the rule write_atomic applies at the end, said before any work is done
    except OSError as e:
        raise UsageError(f"{flag} {shown(path)}: {e.strerror or e}") from None
    if not os.path.isdir(directory):
        raise UsageError(f"{flag} {shown(path)}: directory {shown(directory)} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {shown(path)} cannot be written: directory {shown(directory)} is not writable")


def write_output(flag: str, path: str, data: bytes) -> None:
    """Replace `path` with `data` whole (safefs.write_atomic): a link there is replaced, not written
    through, and a failed write leaves the old file as it was. One-line UsageError on failure."""
    from devctl.safefs import write_atomic

    try:
        write_atomic(path, data)
    except OSError as e:
        raise UsageError(f"{flag} {shown(path)} was not written: {e.strerror or e}; the old file, if any, is unchanged") from None
