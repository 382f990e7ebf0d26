"""The `devctl.publisher/1` snapshot as read from disk: its bounds, and decoding and validating one document.

The writer (devctl.publish) and the reader (devctl.discovery.publishers)
share the bounds and the prefix every snapshot begins with. Anything read may
be damaged or hostile (see SECURITY.md): a document is checked
for size and nesting before json parses it, number tokens are checked while
it parses, and every value is checked for type and range before it becomes a
field of a PublisherSnapshot. No jax, numpy or psutil import here.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from devctl.model.publishers import (
    PCI_BUS_ID_PATTERN,
    SCHEMA,
    PublishedArray,
    PublishedDevice,
    PublisherSnapshot,
)
from devctl.text import printable

PID_MAX = 1 << 22  # the kernel's PID_MAX_LIMIT: no pid is larger
# What every snapshot devctl writes begins with ("schema" is the writer's first key): how a left-over temp file is known as ours.
SNAPSHOT_PREFIX = b'{"schema":"devctl.publisher/1"'
# Bounds on what one snapshot may hold. A job has a handful of local devices
# (1024 is a large forced CPU count); the writer's top_k is capped to MAX_ARRAYS.
# A snapshot of 1024 devices with full allocator stats and the default top_k is
# under 1 MiB; the file cap also bounds the cost of a damaged one (the nesting
# scan and the parser are linear in it).
MAX_FILE_BYTES = 2 << 20
MAX_DEVICES = 1024
MAX_ARRAYS = 1024
MAX_DEPTH = 16  # a snapshot nests 4 levels; json's parser recurses once per level
MAX_STATS = 64  # memory_stats keys (PJRT reports about 15)
_MAX_RANK = 64
# A command line as a person reads it: the snapshot holds the job's whole argv (a 1 MiB command line fits the
# file), and every table, problem line, JSON row and metric label repeats it; past this many characters it is cut
# where it enters, with an ellipsis.
COMMAND_CHARS = 256
SIZE_LIMIT = 1 << 63  # bytes, counts: anything at or past int64's range is not a figure
_ID_LIMIT = 1 << 31
MAX_UNIX_TIME = 253_402_300_800  # 10000-01-01: time.localtime and strftime show any moment before it
MAX_INTERVAL_S = 366 * 24 * 3600.0  # a publish interval longer than a year is not one a job runs with
_PLATFORM = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")
_BUS_ID = re.compile(PCI_BUS_ID_PATTERN)


# --- decoding -----------------------------------------------------------------

# A JSON string, matched so that it always succeeds at its opening quote (at the
# closing quote or at the end of the input): no backtracking, linear on any input.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*\\?(?:"|\Z)', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")


def nesting_too_deep(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """True when `raw` nests arrays and objects deeper than `limit` (or leaves more than `limit` open).

    json's parser recurses once per level, so a 200,000-deep array would end in
    RecursionError, or on a small stack in a crash; this answers first, in a few
    linear passes at C speed: strings blanked, everything but brackets dropped,
    then innermost pairs removed one level per pass.
    """
    brackets = _STRING.sub(b'""', raw).translate(_SQUARE, _NOT_BRACKETS)
    for _ in range(limit):
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets = shorter
    return b"[]" in brackets or brackets.count(b"[") > limit


def load_json(raw: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value in `raw`, with no NaN or infinity, no number token past what a figure needs, and no nesting
    deeper than `max_depth`; ValueError with a reason fit to print otherwise (never RecursionError)."""
    if not raw.strip():
        raise ValueError("empty file")
    if nesting_too_deep(raw, max_depth):
        raise ValueError(f"not valid JSON (nested deeper than {max_depth} levels)")
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_constant, parse_int=_int_token, parse_float=_float_token)
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError and the token checks below
        raise ValueError(f"not valid JSON ({_one_line(e)})") from None


def decode_snapshot(raw: bytes, *, path: str | None = None, now: float | None = None) -> tuple[PublisherSnapshot | None, str | None]:
    """The snapshot in `raw`, or None and why it is not one (a line fit to print)."""
    if len(raw) > MAX_FILE_BYTES:
        return None, f"larger than {MAX_FILE_BYTES} bytes"
    try:
        doc = load_json(raw)
    except ValueError as e:
        return None, str(e)
    if not isinstance(doc, dict):
        return None, "not a JSON object"
    if doc.get("schema") != SCHEMA:
        return None, f"schema {show(doc.get('schema'))}, expected {SCHEMA!r}"
    try:
        return parse_snapshot(doc, path=path, now=now), None
    except (ValueError, TypeError, OverflowError) as e:
        return None, f"not a valid snapshot: {_one_line(e)}"


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _int_token(text: str) -> int:
    # int() of a 5000-digit token costs quadratic time (and raises past 4300 digits on new Pythons).
    # 64 digits is far past any figure, and lets the field checks name a merely too-large value.
    if len(text) > 64:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits")
    return int(text)


def _float_token(text: str) -> float:
    value = float(text[:40]) if len(text) <= 40 else math.inf
    if not math.isfinite(value):
        raise ValueError(f"number {printable(text, 24)} is out of range")
    return value


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def show(value: Any) -> str:
    """A value from a snapshot, short and printable, for a problem line."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return printable(repr(value), 40)



# --- parsing ----------------------------------------------------------------
#
# Every check names the field (devices[3].live_bytes) and the value it found:
# the problem line tells the user which job wrote what. A value outside its
# range (a negative size, a device id -7, a size past 2**63) makes the whole
# snapshot invalid rather than a figure in a table.


def parse_snapshot(doc: dict[str, Any], *, path: str | None = None, now: float | None = None) -> PublisherSnapshot:
    """A `devctl.publisher/1` document as a PublisherSnapshot; ValueError names the first bad field."""
    timestamp = unix_time(doc.get("timestamp"), "timestamp")
    interval = doc.get("interval_s")
    if interval is not None:
        interval = finite_number(interval, "interval_s")
        if not 0 < interval <= MAX_INTERVAL_S:
            raise ValueError(f"interval_s is {interval!r}, not a positive number of seconds (at most {MAX_INTERVAL_S:g})")
    devices = bounded_list(doc.get("devices", []), "devices", MAX_DEVICES)
    arrays = bounded_list(doc.get("largest_arrays", []), "largest_arrays", MAX_ARRAYS)
    command = readable_command(doc.get("command", []), "command")
    pid = whole_number(doc.get("pid"), "pid", PID_MAX + 1)
    if pid == 0:
        raise ValueError("pid is 0, not a process id")
    return PublisherSnapshot(
        pid=pid,
        command=command,
        hostname=bounded_text(doc.get("hostname", ""), "hostname", 255),
        timestamp=timestamp,
        interval_s=interval,
        devices=tuple(_device(d, f"devices[{i}]") for i, d in enumerate(devices)),
        largest_arrays=tuple(_array(a, f"largest_arrays[{i}]") for i, a in enumerate(arrays)),
        error=opt_text(doc.get("error"), "error", 1000),
        process_create_time=None if doc.get("process_create_time") is None else unix_time(doc["process_create_time"], "process_create_time"),
        jax_version=opt_text(doc.get("jax_version"), "jax_version", 64),
        jaxlib_version=opt_text(doc.get("jaxlib_version"), "jaxlib_version", 64),
        backend_initialized=bool(doc.get("backend_initialized", True)),
        snapshot_s=None if doc.get("snapshot_s") is None else seconds(doc["snapshot_s"], "snapshot_s"),
        path=path,
        age_s=None if now is None else now - timestamp,
    )


def memory_stats(d: dict[str, Any], where: str) -> dict[str, int | None] | None:
    """A device's `memory_stats` as a job wrote it (a snapshot's, a post-mortem's): keys printable, values checked."""
    stats = d.get("memory_stats")
    if stats is None:
        return None
    if not isinstance(stats, dict):
        raise ValueError(f"{where}.memory_stats is {show(stats)}, not an object or null")
    if len(stats) > MAX_STATS:
        raise ValueError(f"{where}.memory_stats has {len(stats)} keys, more than {MAX_STATS}")
    return {printable(k, 64): stat_value(v, f"{where}.memory_stats.{printable(k, 64)}") for k, v in stats.items()}


def _device(d: Any, where: str) -> PublishedDevice:
    if not isinstance(d, dict):
        raise ValueError(f"{where} is {show(d)}, not an object")
    stats = memory_stats(d, where)
    platform = d.get("platform", "")
    if not isinstance(platform, str) or not _PLATFORM.match(platform):
        raise ValueError(f"{where}.platform is {show(platform)}, not a platform name")
    return PublishedDevice(
        id=whole_number(d.get("id"), f"{where}.id", _ID_LIMIT),
        platform=platform,
        device_kind=bounded_text(d.get("device_kind", ""), f"{where}.device_kind", 128),
        process_index=whole_number(d.get("process_index", 0) or 0, f"{where}.process_index", _ID_LIMIT),
        live_bytes=whole_number(d.get("live_bytes"), f"{where}.live_bytes", SIZE_LIMIT),
        live_arrays=whole_number(d.get("live_arrays"), f"{where}.live_arrays", SIZE_LIMIT),
        memory_stats=stats,
        memory_stats_error=opt_text(d.get("memory_stats_error"), f"{where}.memory_stats_error", 1000),
        pci_bus_id=_bus_id(d.get("pci_bus_id"), f"{where}.pci_bus_id"),
    )


def _bus_id(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _BUS_ID.match(value):
        raise ValueError(f"{where} is {show(value)}, not a PCI bus id")
    return value


def _array(a: Any, where: str) -> PublishedArray:
    if not isinstance(a, dict):
        raise ValueError(f"{where} is {show(a)}, not an object")
    shape = bounded_list(a.get("shape", []), f"{where}.shape", _MAX_RANK)
    devices = bounded_list(a.get("devices", []), f"{where}.devices", MAX_DEVICES)
    nbytes = whole_number(a.get("nbytes"), f"{where}.nbytes", SIZE_LIMIT)
    ids = tuple(whole_number(x, f"{where}.devices[{i}]", _ID_LIMIT) for i, x in enumerate(devices))
    if len(set(ids)) != len(ids):
        raise ValueError(f"{where}.devices names a device twice")
    return PublishedArray(
        shape=tuple(whole_number(n, f"{where}.shape[{i}]", SIZE_LIMIT) for i, n in enumerate(shape)),
        dtype=bounded_text(a.get("dtype", ""), f"{where}.dtype", 64),
        nbytes=nbytes,
        local_bytes=whole_number(a.get("local_bytes", nbytes), f"{where}.local_bytes", SIZE_LIMIT),
        devices=ids,
    )


def stat_value(v: Any, where: str) -> int | None:
    # -1 is how PJRT plugins say "not set"; the writer maps it to null, older writers may not.
    if v is None or (type(v) is int and v == -1):
        return None
    return whole_number(v, where, SIZE_LIMIT)


def whole_number(v: Any, where: str, limit: int) -> int:
    """An integer in [0, limit): a size, a count, an id."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where} is {show(v) if v is not None else 'missing'}, not an integer")
    if not 0 <= v < limit:
        raise ValueError(f"{where} is {show(v)}, out of range (0 to {limit - 1})")
    return v


def finite_number(v: Any, where: str) -> float:
    # json gives no NaN or infinity here (parse_constant refuses them); a caller handing a dict may.
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{where} is {show(v) if v is not None else 'missing'}, not a number")
    return float(v)


def unix_time(v: Any, where: str) -> float:
    """A moment as Unix seconds: finite, not before 1970 and not past the year 9999 (what a clock can show)."""
    t = finite_number(v, where)
    if not 0 <= t < MAX_UNIX_TIME:
        raise ValueError(f"{where} is {show(v)}, not a time (Unix seconds from 0 to {MAX_UNIX_TIME - 1})")
    return t


def seconds(v: Any, where: str) -> float:
    """A duration: finite and not negative."""
    t = finite_number(v, where)
    if not 0 <= t < MAX_UNIX_TIME:
        raise ValueError(f"{where} is {show(v)}, not a duration in seconds")
    return t


def readable_command(v: Any, where: str, limit: int = COMMAND_CHARS) -> tuple[str, ...]:
    """A job's command line (a list of words) as a person can read it: every word printable, and the words joined
    by spaces at most `limit` characters; a line cut short ends with "…" (a word of its own when the cut falls
    between words). Every word is checked to be a string; what lies past the limit costs no more than that."""
    if not isinstance(v, list):
        raise ValueError(f"{where} is {show(v)}, not a list")
    words: list[str] = []
    used, cut = 0, False  # used: the length of " ".join(words)
    for i, word in enumerate(v):
        if not isinstance(word, str):
            raise ValueError(f"{where}[{i}] is {show(word)}, not a string")
        if cut:
            continue
        room = limit - used - (1 if words else 0)  # at least 1: a word is kept only with room for " …" after it
        shown = printable(word, room + 1)  # costs no more than the room, however long the word
        whole = len(word) <= room and len(shown) <= room
        if whole and (i == len(v) - 1 or room - len(shown) >= 2):
            words.append(shown)
            used += len(shown) + (1 if len(words) > 1 else 0)
            continue
        most = len(shown) - 1 if whole else room  # a word that fits but leaves no room for " …" gives up its end
        words.append(printable(word, most) if most >= 1 else "…")  # ends with "…"
        cut = True
    return tuple(words)


def bounded_list(v: Any, where: str, limit: int) -> list:
    if not isinstance(v, list):
        raise ValueError(f"{where} is {show(v)}, not a list")
    if len(v) > limit:
        raise ValueError(f"{where} has {len(v)} entries, more than {limit}")
    return v


def bounded_text(v: Any, where: str, limit: int) -> str:
    if not isinstance(v, str):
        raise ValueError(f"{where} is {show(v)}, not a string")
    return printable(v, limit)


def opt_text(v: Any, where: str, limit: int) -> str | None:
    return None if v is None else bounded_text(v, where, limit)
