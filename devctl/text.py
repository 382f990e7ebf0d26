"""Text that someone else wrote, made safe to show on a terminal."""

from __future__ import annotations

import re
from typing import Sequence

# A program's name, wherever devctl names a job: the exporter's `program` label, memstats' tables and problem lines,
# --top's header, the post-mortems and doctor's line for them.
PROGRAM_CHARS = 120


_PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*[dmt]?$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def program_name(argv: Sequence[str] | str | None) -> str:
    """A process's program, the one name devctl gives a job: the script's base name (`train.py`), `python -m module`,
    `python -c`, or the executable's base name; never an argument, which may be a secret and changes from run to
    run. A command line already joined into one string is split at spaces (a path with a space is cut short)."""
    import posixpath

    if isinstance(argv, str):
        argv = argv.split()
    argv = list(argv or ())
    if argv and argv[0] in ("-c", "-m"):
        # sys.argv without the interpreter, as jobs with an older devctl answer --top: `python -c` says "-c".
        argv = ["python", *argv]
    exe = posixpath.basename(argv[0]) if argv else ""
    if not exe:
        return "?"
    if not _PYTHON.match(exe):
        return printable(exe, PROGRAM_CHARS)
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):  # --check-hash-based-pycs is the long option that takes a value
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        if not arg.startswith("-") or arg == "-":
            break
        for j, flag in enumerate(arg[1:], start=1):  # -uBm mod: flags joined, the last may take a value
            value = arg[j + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
            if flag == "c":
                return printable(f"{exe} -c", PROGRAM_CHARS)
            if flag == "m":
                return printable(f"{exe} -m {value if _MODULE.match(value) else '?'}", PROGRAM_CHARS)
            if flag in "WX":
                i += 0 if arg[j + 1 :] else 1
                break
        i += 1
    if i >= len(argv):
        return printable(exe, PROGRAM_CHARS)
    if argv[i] == "-":
        return printable(f"{exe} -", PROGRAM_CHARS)
    return printable(posixpath.basename(argv[i].rstrip("/")) or exe, PROGRAM_CHARS)


def printable(text: str, limit: int | None = None) -> str:
    """`text` safe to print on a terminal, at most `limit` characters (then '…').

    A snapshot's command line, a process's command, a name read from sysfs or a
    --host-root tree, an error from a plugin: all are written by someone else,
    and an escape sequence or a newline in them would redraw the user's terminal
    or forge an output line. Every character that is not printable (C0/C1
    controls, DEL, bidi overrides, zero-width and line separators) is shown as a
    Python-style escape instead, so the text stays readable and inert.
    """
    cut = limit is not None and len(text) > limit
    if limit is not None:
        text = text[:limit]  # before escaping: a megabyte of text costs no more than `limit` characters
    if not text.isprintable():
        text = "".join(c if c.isprintable() else _escape(c) for c in text)
    if limit is None or (not cut and len(text) <= limit):
        return text
    return text[: max(limit - 1, 0)] + "…"


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


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


def first_line(e: BaseException) -> str:
    """An exception's message in one line (its first), or its type's name where it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
