"""Options shared by several commands, and their one grammar each: platforms, devices, lists, files.

The cluster options (--distributed ...) have their own module, devctl/cli/cluster.py.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Optional, overload

import typer

from devctl.cli import completion
from devctl.errors import UsageError
from devctl.model.devices import PHYSICAL_VIEWS, DeviceRef
from devctl.text import quoted, shown  # noqa: F401  (flags and files are quoted as every error line quotes them)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
CsvOpt = Annotated[bool, typer.Option("--csv", help="Print the table as CSV on stdout (raw numbers, a header line).")]


def check_output_format(json_out: bool, csv_out: bool) -> None:
    """--json and --csv are two answers to one question: refuse both rather than pick one silently."""
    if json_out and csv_out:
        raise UsageError("--json and --csv are exclusive; give one")


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
        autocompletion=completion.directories,
        help="Read sysfs, /dev and /proc under PATH (a host's / mounted into a container).",
    ),
]
PlatformOpt = Annotated[
    Optional[list[str]],
    typer.Option("--platform", "-p", metavar="NAME", autocompletion=completion.platforms, help="Only this JAX platform (repeatable): cpu, cuda, rocm, tpu, gpu or a plugin's name."),
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
        import os

        # typer reads the variable too, but not every typer the project allows does (0.26 leaves it unread).
        text = os.environ.get("DEVCTL_TIMEOUT")
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        timeout_s = float(text)
    except ValueError:
        timeout_s = float("nan")
    if not (0 < timeout_s <= MAX_TIMEOUT_S):  # NaN fails this too
        raise UsageError(f"--timeout (or DEVCTL_TIMEOUT) must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {quoted(text)}")
    return timeout_s


# ---- platforms and devices ---------------------------------------------------------------------------------


def known_platforms() -> list[str]:
    """The platform names --platform and a device's `platform:` accept: those JAX knows by name, and those
    PJRT_NAMES_AND_LIBRARY_PATHS adds."""
    import os

    from devctl.discovery.envvars import KNOWN_PLATFORM_NAMES

    from_env = [item.split(os.pathsep)[0].lower() for item in os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS", "").split(",") if item]
    return sorted(set(KNOWN_PLATFORM_NAMES) | set(from_env))


def check_platforms(platforms: list[str] | None) -> list[str] | None:
    """--platform: lower-cased platform names (repeatable, comma-separated), `gpu` kept as an alias JAX expands itself."""
    if not platforms:
        return None
    known = known_platforms()
    names = []
    for item in platforms:
        for name in item.split(","):
            name = name.strip().lower()
            if name not in known:
                raise UsageError(f"unknown --platform {name!r}; accepted: {', '.join(known)}")
            names.append(name)
    return names


# A device id has at most this many digits (leading zeros aside): far above any machine's, and int() stays cheap.
_ID_DIGITS = 9


def parse_devices(flag: str, items: list[str] | None, *, physical_views: bool = False) -> tuple[DeviceRef, ...] | None:
    """A repeatable, comma-separated device option: None when not given, () for `all` (every device).

    Each entry is `N` (a JAX device id) or `platform:N` (cpu:0, cuda:1, rocm:0, tpu:0, or any name
    --platform accepts; with `physical_views`, memstats' tpu-chip:N and nvml:N too). `01` is device 1.
    """
    example = _device_example(physical_views) + "; several comma-separated, or all"
    names = split_list(flag, items, example)
    if names is None:
        return None
    if any(n.lower() == "all" for n in names):
        return ()
    return tuple(dict.fromkeys(_device(flag, n, physical_views, example) for n in names))


def parse_device(flag: str, text: str | None) -> DeviceRef | None:
    """One device (--src, --dst): `N` or `platform:N`, as parse_devices reads each entry."""
    example = _device_example(False)
    if text is None:
        return None
    names = split_list(flag, [text], example)
    if len(names) > 1 or names[0].lower() == "all":
        raise UsageError(f"{flag} takes one device, got {shown(text)}; give {example}")
    return _device(flag, names[0], False, example)


def _device(flag: str, text: str, physical_views: bool, example: str) -> DeviceRef:
    platform, colon, ident = text.rpartition(":")
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
    digits = ident.lstrip("0") or "0"
    if not (ident.isascii() and ident.isdigit() and len(digits) <= _ID_DIGITS) or (colon and not platform):
        raise UsageError(f"{flag} {shown(text)} is not a device id; give {example}")
    if not platform:
        return DeviceRef(int(digits))
    platform = platform.lower()
    if platform in PHYSICAL_VIEWS and not physical_views:
        raise UsageError(f"{flag} {shown(text)} is a device JAX does not use (shown by devctl memstats); give {example}")
    accepted = known_platforms() + (list(PHYSICAL_VIEWS) if physical_views else [])
    if platform not in accepted:
        raise UsageError(f"{flag} {shown(text)} names no platform devctl knows; platforms: {', '.join(accepted)}")
    return DeviceRef(int(digits), platform)


def _device_example(physical_views: bool) -> str:
    if physical_views:
        return "a JAX device id (0), platform:id (cpu:1, cuda:0) or a chip or GPU JAX does not use (tpu-chip:0, nvml:3)"
    return "a JAX device id (0) or platform:id (cpu:1, cuda:0)"


# ---- values and files given on the command line ------------------------------------------------------------


@overload
def split_list(flag: str, items: list[str], example: str) -> list[str]: ...
@overload
def split_list(flag: str, items: list[str] | None, example: str) -> list[str] | None: ...
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


def check_count(flag: str, value: int | None, default: int, *, low: int, high: int = 1_000_000) -> int:
    """--repeats, --warmups: `default` when not given, else a whole number from `low` to `high`."""
    if value is None:
        return default
    if value < low or value > high:
        raise UsageError(f"{flag} must be between {low} and {high}, got {value}")
    return value


def check_seconds(flag: str, value: float | None, default: float, *, high: float = 60) -> float:
    """--min-time, --budget: `default` when not given, else seconds from 0 to `high` (NaN fails this too)."""
    if value is None:
        return default
    if not (0 <= value <= high):
        raise UsageError(f"{flag} must be between 0 and {high:g} seconds, got {value:g}")
    return value


# dtype names as JAX writes them, by the short names people type (bench matmul's own names are the short ones).
DTYPE_NAMES = {"bf16": "bfloat16", "f32": "float32", "fp32": "float32", "f16": "float16", "i32": "int32", "i8": "int8"}


def renamed(items: list[str] | None, names: dict[str, str]) -> list[str] | None:
    """Repeatable, comma-separated values with each name `names` has (any case) replaced by its entry there."""
    if items is None:
        return None
    return [",".join(names.get(t.strip().lower(), t) for t in item.split(",")) for item in items]


def choose(flag: str, items: list[str] | None, choices: tuple[str, ...], default: tuple[str, ...], *, allow_all: bool = True) -> tuple[str, ...]:
    """Names from a closed set (repeatable or comma-separated, any case), in the set's order; `all` for every one
    when `allow_all`; `default` when not given."""
    accepted = ", ".join(choices) + (", all" if allow_all else "")
    names = split_list(flag, items, f"one or more of {accepted}")
    if names is None:
        return default
    names = [n.lower() for n in names]
    for n in names:
        if n not in choices and not (allow_all and n == "all"):
            raise UsageError(f"unknown {flag} {shown(n)}; accepted: {accepted}")
    if allow_all and "all" in names:
        return choices
    return tuple(c for c in choices if c in names)


def option_group(options: dict[str, tuple[Any, Any]], replaces: tuple[str, ...], build: Callable[..., dict[str, Any]]) -> Callable:
    """A decorator: `command(..., <replaces>)` as a typer command with `options` (name -> (annotation, default))
    after its own; the command is called with what `build(**those options' values)` returns in their place."""
    import functools
    import inspect

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command, eval_str=True)
        kept = [p for name, p in own.parameters.items() if name not in replaces]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=kind) for name, (kind, default) in options.items()]

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            flags = {name: values.pop(name) for name in options}
            return command(**values, **build(**flags))

        # typer reads the options from the signature and the annotations: these, not the command's own.
        wrapper.__signature__ = own.replace(parameters=kept + added)  # type: ignore[attr-defined]  # inspect.signature reads it; typeshed's FunctionType declares no __signature__
        wrapper.__annotations__ = {p.name: p.annotation for p in kept + added}
        return wrapper

    return decorate
