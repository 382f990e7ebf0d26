"""Consoles and the JSON writer shared by every command.

Data goes to stdout, messages and progress to stderr. A table on a terminal
gets colour and boxes; when stdout is not a terminal, or NO_COLOR is set,
it is plain text that greps and diffs cleanly.
"""

from __future__ import annotations

import json
import os
import sys
from functools import lru_cache


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


@lru_cache(maxsize=None)
def _console(stderr: bool):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    no_color = bool(os.environ.get("NO_COLOR")) or not tty
    return Console(
        file=stream,
        stderr=stderr,
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        emoji=False,
        # Off a terminal, never wrap: lines stay whole for grep and diff.
        width=None if tty else 200,
        soft_wrap=not tty,
    )


def out():
    """The stdout console (tables)."""
    return _console(False)


def err():
    """The stderr console (messages, warnings, progress)."""
    return _console(True)


def table_box():
    """Box style for tables: rounded on a terminal, none (plain columns) otherwise."""
    from rich import box

    return box.ROUNDED if stdout_is_terminal() else None


def print_json(document: dict) -> None:
    """One JSON document on stdout: plain json.dumps, no markup, no wrapping."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(document: dict) -> None:
    """One JSON Lines record on stdout, flushed for `| jq`."""
    sys.stdout.write(json.dumps(document, separators=(",", ":"), default=str) + "\n")
    sys.stdout.flush()


def warn(message: str) -> None:
    err().print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    err().print(message, markup=False)
