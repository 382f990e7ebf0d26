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
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal


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


def message_lines(line: str, stream=None) -> str:
    """A message line (`devctl: error: ...`) as written to `stream` (stderr by default): whole off a terminal,
    one line for logs and grep; on a terminal, broken between words to its width with the lines after the first
    indented, so the terminal never splits a word at its edge (issue 24: `... s` / `o there is nothing to measure`).
    Written with sys.stderr.write, not through rich, it would otherwise wrap wherever the edge falls."""
    stream = sys.stderr if stream is None else stream
    try:
        if not stream.isatty():
            return line
        columns = os.environ.get("COLUMNS", "")
        width = int(columns) if columns.isdigit() and int(columns) > 0 else os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return line
    if width < 20 or len(line) <= width and line.isascii():
        return line
    return "\n".join(wrap(line, width, hang="  "))


def warn(message: str) -> None:
    err().print(f"warning: {message}", markup=False)


def info(message: str) -> None:
    err().print(message, markup=False)


# ---- text and tables that fit the terminal -----------------------------------------------------------------
#
# One rule for every view: no line is wider than the terminal, no word is split (a path breaks after a '/',
# a list after a ',', a name after a '-'; only a word with none and longer than a whole line is cut), and a table row is one
# line. When a table is too wide its columns give way, least useful first (Column.priority): a column that
# says nothing (every value '-') is left out, one with the same value on every row becomes one line above the
# table, and any other goes on a line of its own under each row (or is left out, when it is said elsewhere).
# Off a terminal the width is unbounded, so pipes always get the whole table, one row per line.

# Inside a word too long for its line, the places it may break: after a path separator, a list's comma, a hyphen.
_BREAK_AFTER = "/,-"


@dataclass(frozen=True)
class Column:
    """A table column, and how it gives way when the table is wider than the terminal."""

    header: str
    justify: Literal["left", "right"] = "left"
    priority: int = 0  # 0: always in the table; of the others, the highest number gives way first
    short: str | None = None  # a shorter header, tried before any column gives way
    detail: bool = True  # giving way: a line of its own under its row; False: left out (said elsewhere in the view)
    blank: tuple[str, ...] = ("", "-")  # values that say nothing: a column of nothing else gives way first
    once: bool = False  # on a line under its row: not said again when the row above said the same
    hoist: bool = True  # giving way with one value on every row: one line above the table (False: as if they differed)


@dataclass(frozen=True)
class Fit:
    """Where each column of a table goes at a given width: `placement` per column is one of "table",
    "hoisted" (one line above the table: every row has the same value), "detail" (a line under each row)
    or "dropped"."""

    headers: tuple[str, ...]
    placement: tuple[str, ...]
    widths: tuple[int, ...]  # each column's width in cells, as in the table
    boxed: bool  # a box around the table: only when no value goes under its row
    width: int  # the table's width in cells

    def where(self, place: str) -> list[int]:
        return [i for i, p in enumerate(self.placement) if p == place]


def _table_width(widths, kept: list[int], boxed: bool) -> int:
    if not kept:
        return 0
    # Boxed: "│ a │ b │", a space either side of every value; plain: two spaces between columns.
    return sum(widths[i] for i in kept) + (3 * len(kept) + 1 if boxed else 2 * (len(kept) - 1))


def fit_columns(columns: list[Column], rows: list[list[str]], width: int, *, boxed: bool = True) -> Fit:
    """Which columns stay in a one-line-per-row table `width` cells wide, and where the others go.

    Every column in the table is as wide as its widest value and its header, so nothing in it is
    wrapped or cut. When the whole table does not fit: shorter headers first, then the columns with a
    priority give way (highest first, the rightmost of equals first), then the widest of the others but
    the first. A box is drawn only around a table with nothing under its rows.
    """
    from rich.cells import cell_len

    n = len(columns)
    headers = [c.header for c in columns]
    longest = [max((cell_len(r[i]) for r in rows), default=0) for i in range(n)]
    place = ["table"] * n

    def widths() -> list[int]:
        return [max(cell_len(headers[i]), longest[i]) for i in range(n)]

    def state() -> tuple[bool, int]:
        box = boxed and "detail" not in place
        return box, _table_width(widths(), [i for i in range(n) if place[i] == "table"], box)

    def fits() -> bool:
        return state()[1] <= width

    def give_way(i: int) -> None:
        c = columns[i]
        values = {r[i].strip() for r in rows}  # a live view pads its cells
        if values <= set(c.blank):
            place[i] = "dropped"
        elif len(rows) > 1 and len(values) == 1 and c.hoist:
            place[i] = "hoisted"
        else:
            place[i] = "detail" if c.detail else "dropped"

    if not fits():
        headers = [c.short or c.header for c in columns]
    yielding = sorted((i for i in range(n) if columns[i].priority > 0), key=lambda i: (-columns[i].priority, -i))
    # A column that says nothing goes before any that says something.
    yielding.sort(key=lambda i: 0 if {r[i].strip() for r in rows} <= set(columns[i].blank) else 1)
    for i in yielding:
        if fits():
            break
        give_way(i)
    while not fits():
        rest = [i for i in range(1, n) if place[i] == "table"]
        if not rest:
            break
        give_way(max(rest, key=lambda i: (widths()[i], i)))
    box, total = state()
    return Fit(tuple(headers), tuple(place), tuple(widths()), box, total)


def wrap(text: str, width: int, indent: str = "", hang: str | None = None) -> list[str]:
    """`text` as lines of at most `width` cells, broken between words and never inside one: a word longer
    than a line breaks after a '/' or a ',' (a path, a list) or a '-', and is cut only when it has neither. The first
    line starts with `indent`, the others with `hang` (by default as many spaces), so wrapped prose keeps
    its hanging indent.

    Linear in the length of `text` (issue 23): each word is measured once and a line's width is counted as it
    grows, never re-measured; a word longer than a line is cut in one pass. Measuring the whole rest of a
    100,000-character word at every cut took minutes."""
    from rich.cells import cell_len

    hang = " " * cell_len(indent) if hang is None else hang
    hang_cells = cell_len(hang)
    if hang_cells > width // 2:
        hang, hang_cells = "", 0  # a terminal narrower than the indent: the words matter more
    lines: list[str] = []
    prefix, prefix_cells = indent, cell_len(indent)
    current: list[str] = []  # the words of the line being filled, joined once it is full
    current_cells = 0
    for word in text.split():
        cells = cell_len(word)
        if prefix_cells + (current_cells + 1 + cells if current else cells) <= width:
            current.append(word)
            current_cells += cells + (1 if len(current) > 1 else 0)
            continue
        start = 0
        if current and hang_cells + cells > width:
            # Too long for any line: it starts here, broken after a '/' or ',' where the line ends.
            room = width - prefix_cells - current_cells - 1
            if room > 0:
                end = _break_at(word, 0, room)
                if word[end - 1] in _BREAK_AFTER and end < len(word):
                    current.append(word[:end])
                    start, cells = end, cells - cell_len(word[:end])
        if current:
            lines.append(prefix + " ".join(current))
            prefix, prefix_cells, current = hang, hang_cells, []
        while start < len(word) and prefix_cells + cells > width:
            end = _break_at(word, start, max(width - prefix_cells, 1))
            head = word[start:end]
            lines.append(prefix + head)
            prefix, prefix_cells = hang, hang_cells
            start, cells = end, cells - cell_len(head)
        if start < len(word):
            current, current_cells = [word[start:]], cells
        else:
            current, current_cells = [], 0
    lines.append(prefix + " ".join(current))
    return [line.rstrip() for line in lines]


def _break_at(word: str, start: int, room: int) -> int:
    """Where the head of `word[start:]` that fits `room` cells ends: after its last '/', ',' or '-' (never one of
    a leading '--', nor the word's last character), else as many characters as fit; at least one character.
    Costs as much as the head is long, whatever the length of the word."""
    from rich.cells import get_character_cell_size

    n = len(word)
    ahead = word[start : start + room + 1]
    if ahead.isascii() and ahead.isprintable():
        fitting = min(room, n - start)  # every printable ASCII character is one cell
    else:
        fitting, used = 0, 0
        for c in word[start : start + 4 * room + 4]:  # a line holds few zero-width characters before it is full
            used += get_character_cell_size(c)
            if used > room:
                break
            fitting += 1
    fitting = max(fitting, 1)
    stop = start + fitting
    lead = start  # the first character that is not part of a leading run of '-'
    while lead < stop and word[lead] == "-":
        lead += 1
    for end_limit in (stop, stop - 1):  # a break char at the word's very end is no place to break
        p = max(word.rfind(c, start, end_limit) for c in _BREAK_AFTER)
        if p + 1 >= n:
            continue
        if p > lead:
            return p + 1
        break
    return stop


def table_lines(columns: list[Column], rows: list[list], *, title: str | None = None, width: int | None = None,
                boxed: bool | None = None, rows_shown: int | None = None, keep: dict | None = None) -> list:  # fmt: skip
    """A table as rich Text lines that fit `width` (the terminal's by default): see fit_columns for what gives
    way. Every cell is shown as printable() makes it (data, never markup or control characters). With
    `rows_shown`, only the first rows are printed, laid out as the whole table would be. `keep` (a dict the
    caller holds across redraws, as a live view does) keeps the first layout while the width is the same: no
    column appears, vanishes or narrows between frames; one widens only for a value wider than it, and the
    layout is made afresh only where that would run past the width."""
    from rich.cells import cell_len
    from rich.text import Text

    from devctl.text import printable

    width = out().width if width is None else width
    boxed = stdout_is_terminal() if boxed is None else boxed
    cells = [["-" if v is None else printable(str(v)) for v in row] for row in rows]
    fit = _kept_fit(keep, columns, cells, width, boxed) if keep is not None else None
    if fit is None:
        fit = fit_columns(columns, cells, width, boxed=boxed)
        if keep is not None:
            keep.update(fit=fit, key=(width, boxed, tuple(c.header for c in columns)))
    lines: list = [Text(line) for line in wrap(printable(title), width, hang="  ")] if title else []
    for i in fit.where("hoisted"):  # under the title, indented: what every row has
        lines += [Text(line) for line in wrap(cells[0][i], width, indent=f"  {columns[i].header}: ")]
    kept = fit.where("table")
    details = fit.where("detail")

    def pad(text: str, j: int, i: int) -> str:
        gap = " " * (fit.widths[i] - cell_len(text))
        text = gap + text if columns[i].justify == "right" else text + gap
        return f" {text} " if fit.boxed else text

    def row_line(values: list[str], style: str | None = None):
        line = Text()
        for j, i in enumerate(kept):
            if j:
                line.append("│" if fit.boxed else "  ")
            elif fit.boxed:
                line.append("│")
            line.append(pad(values[i], j, i), style=style)
        if fit.boxed:
            line.append("│")
        else:
            line.rstrip()
        return line

    def rule(left: str, middle: str, right: str) -> Text:
        spans = [fit.widths[i] + 2 for i in kept]
        return Text(left + middle.join("─" * s for s in spans) + right)

    if fit.boxed and kept:
        lines.append(rule("╭", "┬", "╮"))
    if kept:
        lines.append(row_line(list(fit.headers), style="bold"))
    if fit.boxed and kept:
        lines.append(rule("├", "┼", "┤"))
    label_width = max((cell_len(columns[i].header) for i in details), default=0) + 2
    if label_width > width // 3:
        label_width = 0  # labels too long to align their values under: each value follows its own label
    previous: list[str] | None = None
    for row in cells[:rows_shown]:
        if kept:
            lines.append(row_line(row))
        for i in details:
            value = row[i]
            if value in columns[i].blank or (columns[i].once and previous is not None and previous[i] == value):
                continue
            label = f"  {columns[i].header}: ".ljust(label_width + 2) if label_width else f"  {columns[i].header}: "
            hang = " " * (label_width + 2) if label_width else "    "
            lines += [Text(line) for line in wrap(value, width, indent=label, hang=hang)]
        previous = row
    if fit.boxed and kept:
        lines.append(rule("╰", "┴", "╯"))
    return lines


def _kept_fit(keep: dict, columns: list[Column], cells: list[list[str]], width: int, boxed: bool) -> Fit | None:
    """The layout `keep` holds, if it was made for this width and these columns, with each column at least as
    wide as before; None when there is none or the kept one no longer fits."""
    from rich.cells import cell_len

    fit: Fit | None = keep.get("fit")
    if fit is None or keep.get("key") != (width, boxed, tuple(c.header for c in columns)):
        return None
    if any(len({r[i] for r in cells}) > 1 for i in fit.where("hoisted")):
        return None  # a value said once for every row no longer is every row's
    widths = tuple(max([w, *(cell_len(r[i]) for r in cells)]) for i, w in enumerate(fit.widths))
    total = _table_width(widths, fit.where("table"), fit.boxed)
    return replace(fit, widths=widths, width=total) if total <= width else None


def print_lines(lines) -> None:
    """Lines made to fit the terminal (table_lines, wrap), on stdout.

    Printed a few hundred lines at a time: printed one by one, each line cost rich a render and a flush of
    its own, a third of a millisecond (a 100,000-character value wrapped to 3,000 lines took a second); printed
    as one text, rich splits it into lines in time that grows with the square of its length."""
    from rich.text import Text

    lines = list(lines)
    if all(isinstance(line, (str, Text)) for line in lines):
        newline = Text("\n")
        lines = [
            newline.join(line if isinstance(line, Text) else Text(line) for line in lines[i : i + _LINES_PER_PRINT])
            for i in range(0, len(lines), _LINES_PER_PRINT)
        ]
    console = out()
    for line in lines:
        console.print(line, markup=False, highlight=False)


_LINES_PER_PRINT = 100


def print_table(columns: list[Column], rows: list[list], *, title: str | None = None) -> None:
    print_lines(table_lines(columns, rows, title=title))


def say(text: str, *, indent: str = "", hang: str | None = None, style: str | None = None) -> None:
    """One line of prose (made printable), wrapped to the terminal with its hanging indent; whole off a terminal."""
    from rich.text import Text

    from devctl.text import printable

    print_lines([Text(line, style=style or "") for line in wrap(printable(text), out().width, indent=indent, hang=hang)])


