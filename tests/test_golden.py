"""Golden tests: every table view, rendered as a terminal of 80 and of 200 columns shows it.

Each report is built from the model's dataclasses (tests/golden_reports.py: an 8-GPU NVIDIA host, two of
them as a cluster, and a broken CPU host), printed as a command prints it (devctl.render.emit.emit, which
picks the table by the report's schema id) through the real console factory
(devctl.render.console._console, which decides boxes, colour and width from the stream it is given), and
compared with tests/golden/<view>-<width>.txt. The goldens are what people see: review a changed one by
eye before accepting it.

Regenerate after an intended change of a table:

    DEVCTL_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py

which rewrites every golden that differs, removes those no view produces any more, and passes; `git diff
tests/golden` then shows the change for review.
"""

from __future__ import annotations

import difflib
import io
import os
import sys
from pathlib import Path

import pytest
from golden_reports import VIEWS

GOLDEN = Path(__file__).resolve().parent / "golden"
WIDTHS = (80, 200)
UPDATE = bool(os.environ.get("DEVCTL_UPDATE_GOLDEN"))
REGENERATE = "DEVCTL_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py"


class _Terminal(io.StringIO):
    """A stdout that says it is a terminal, as the user's does."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:  # rich asks for a size only when COLUMNS is unset; it is set here
        raise io.UnsupportedOperation("fileno")


def render(view: str, width: int, monkeypatch: pytest.MonkeyPatch) -> str:
    """What `view`'s table looks like on a `width`-column terminal with NO_COLOR set (no escapes to compare)."""
    from devctl.render import console
    from devctl.render.emit import emit

    report = VIEWS[view]()
    screen = _Terminal()
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "LINES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys, "stdout", screen)
    console._console.cache_clear()  # the consoles are cached per process: build them for this screen
    try:
        emit(report, json_out=False)
    finally:
        console._console.cache_clear()
    # Trailing spaces are invisible on a terminal, and editors strip them from golden files.
    return "\n".join(line.rstrip() for line in screen.getvalue().split("\n"))


def golden_path(view: str, width: int) -> Path:
    return GOLDEN / f"{view}-{width}.txt"


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_table_matches_its_golden(view, width, monkeypatch):
    from rich.cells import cell_len

    shown = render(view, width, monkeypatch)
    assert shown.strip(), f"{view} printed nothing"
    # On a terminal nothing may run past the right edge: rich wraps or folds it, or the terminal would.
    wide = [line for line in shown.splitlines() if cell_len(line) > width]
    assert not wide, f"{view} at {width} columns has lines wider than the terminal:\n" + "\n".join(wide)
    assert "\x1b" not in shown, "NO_COLOR is set: no escape sequence may reach the screen"

    path = golden_path(view, width)
    if UPDATE:
        if not path.exists() or path.read_text(encoding="utf-8") != shown:
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(shown, encoding="utf-8")
        return
    assert path.exists(), f"no golden {path.relative_to(GOLDEN.parent.parent)}; create it with: {REGENERATE}"
    expected = path.read_text(encoding="utf-8")
    if shown != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), shown.splitlines(), "golden", "rendered now", lineterm=""))
        pytest.fail(f"{view} at {width} columns differs from {path.name}:\n{diff}\n\nIf the change is intended: {REGENERATE}")


def test_every_golden_belongs_to_a_view():
    """A golden no view renders any more is a stale picture of the tool; regeneration removes it."""
    wanted = {golden_path(v, w).name for v in VIEWS for w in WIDTHS}
    stale = sorted(p.name for p in GOLDEN.glob("*.txt") if p.name not in wanted)
    if UPDATE:
        for name in stale:
            (GOLDEN / name).unlink()
        return
    assert not stale, f"goldens no view renders: {stale}; remove them with: {REGENERATE}"


def test_goldens_cover_every_table_view():
    """Every renderer a command prints a table with (emit()'s TABLES: schema id -> renderer) has a golden."""
    from devctl.render.emit import TABLES

    shown = {build().schema for build in VIEWS.values()}
    missing = set(TABLES.values()) - {TABLES[schema] for schema in shown}
    assert not missing, f"table renderers without a golden: {sorted(missing)}"
    assert shown >= {"devctl.list/1", "devctl.plugins/1", "devctl.env/1", "devctl.memstats/2", "devctl.bench.transfer/2",
                     "devctl.check/1", "devctl.doctor/1"}  # fmt: skip


def test_the_console_really_is_a_terminal_of_that_width(monkeypatch):
    """The goldens are of the terminal path (boxes, wrapping at the width), not of the plain path for pipes."""
    from devctl.render import console

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setattr(sys, "stdout", _Terminal())
    console._console.cache_clear()
    try:
        out = console.out()
        assert out.is_terminal and out.width == 80 and console.table_box() is not None
    finally:
        console._console.cache_clear()


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_every_golden_report_is_a_document_its_schema_accepts(view):
    """A golden shows what devctl prints for a document it could have written: the report behind each one passes
    the JSON Schema its `schema` id names, as a real run's --json does."""
    from conftest import validate_schema

    from devctl.model import to_jsonable

    doc = to_jsonable(VIEWS[view]())
    name = doc["schema"].removeprefix("devctl.").rsplit("/", 1)[0]
    validate_schema(doc, name)
