"""Text that someone else wrote, made safe to show on a terminal."""

from __future__ import annotations


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
