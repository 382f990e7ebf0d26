"""Consoles and the JSON writer shared by every command.

Data goes to stdout, messages and progress to stderr. A table on a terminal
gets colour and boxes; when stdout is not a terminal, or NO_COLOR is set,
it is plain text that greps and diffs cleanly: no colour, no wrapping, no
trailing spaces.
"""

from __future__ import annotations

import json
import os
import sys
from functools import lru_cache


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def reader_gone() -> None:
    """stdout's reader went away (`devctl list | head -1`): stop quietly, with success; the reader chose to stop."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
    raise SystemExit(0)


@lru_cache(maxsize=None)
def _console(stderr: bool):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own exits 1, the code of a failed check
            reader_gone()

        def print(self, *objects, **kwargs) -> None:
            if tty:
                return super().print(*objects, **kwargs)
            # Plain text: rich pads every cell to its column's width; a line's end is no place for spaces.
            with self.capture() as captured:
                super().print(*objects, **kwargs)
            text = "\n".join(line.rstrip() for line in captured.get().split("\n"))
            try:
                self.file.write(text)
                self.file.flush()
            except BrokenPipeError:
                reader_gone()

    no_color = bool(os.environ.get("NO_COLOR")) or not tty
    return _Console(
        file=stream,
        stderr=stderr,
        # What devctl prints is data (paths, flags, 'jax[cuda12]' specs), never markup: rich would drop or choke on '[...]'.
        markup=False,
        no_color=no_color,
        color_system=None if no_color else "auto",
        highlight=False,
        emoji=False,
        # Off a terminal, never wrap: lines stay whole for grep and diff.
        width=None if tty else 100_000,
        soft_wrap=not tty,
    )


def out():
    """The stdout console (tables)."""
    return _console(False)


def err():
    """The stderr console (messages, warnings, progress)."""
    return _console(True)


def plain(value):
    """A str as rich Text, shown as it is but for control characters, which are escaped (a plugin's error, an
    environment variable or a name read from the machine must not move the cursor or forge a line); anything
    else unchanged."""
    if isinstance(value, str):
        from rich.text import Text

        from devctl.text import printable

        return Text(printable(value))
    return value


def data_table(*headers, title=None, **kwargs):
    """A rich Table whose title, headers and cells are plain text whatever console prints it.

    Every renderer builds its tables here, so none can forget: a str cell given to a bare
    rich Table is parsed as markup (`--xla_dump_to=[/tmp/x]` raises MarkupError, `[bold]` vanishes).
    """
    kwargs.setdefault("box", table_box())
    kwargs.setdefault("pad_edge", False)
    if title is not None:
        kwargs.setdefault("title_justify", "left")
    return _data_table_class()(*headers, title=plain(title), **kwargs)  # headers go through add_column


@lru_cache(maxsize=None)
def _data_table_class():
    from rich.table import Table

    class DataTable(Table):
        def add_column(self, header="", footer="", *args, **kwargs) -> None:
            super().add_column(plain(header), plain(footer), *args, **kwargs)

        def add_row(self, *cells, **kwargs) -> None:
            super().add_row(*map(plain, cells), **kwargs)

    return DataTable


def table_box():
    """Box style for tables: rounded on a terminal, none (plain columns) otherwise."""
    from rich import box

    return box.ROUNDED if stdout_is_terminal() else None


def print_json(document: dict) -> None:
    """One JSON document on stdout: plain json.dumps, no markup, no wrapping."""
    _write(json.dumps(document, indent=2, default=str) + "\n")


def print_json_line(document: dict) -> None:
    """One JSON Lines record on stdout, flushed for `| jq`."""
    _write(json.dumps(document, separators=(",", ":"), default=str) + "\n")


def write_stdout(text: str) -> None:
    """Text on stdout as it is (CSV, JSON), flushed; a reader that went away ends devctl quietly."""
    _write(text)


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


def warn(message: str) -> None:
    err().print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    err().print(message, markup=False)
