"""What an out-of-memory error asked for, read from its message: the size of the failed request and the local
device ordinal the message names. Pure stdlib: the in-job publisher parses the message it caught, and anything
that reads a post-mortem's `error` can parse it again without jax.

The messages, as XLA and the PJRT plugins write them (tests/test_units_oom.py holds each as a fixture):

- CUDA, BFC allocator: `Out of memory while trying to allocate 4.00TiB with allocator GPU_0_bfc on device 0.`
  (newest), `... allocate 2.24GiB.` (no device), `... allocate 3199993600 bytes.` (oldest); pinned host memory
  says `Out of host memory while trying to allocate ...`. Its log line (stderr, sometimes chained) says
  `Allocator (GPU_0_bfc) ran out of memory trying to allocate 4.00TiB (rounded to 4398046511104)`.
- CUDA platform allocator and ROCm: `Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0`.
- CUDA async allocator (cuda_malloc_async): the BFC-style text, and in a chained message
  `gpu_async_1 cuMemAllocAsync failed to allocate 1225195446464 bytes: ...`.
- TPU runtime: `Error allocating device buffer: Attempting to allocate 15.65G. That was not possible. There are
  11.08G free.; (0x0x0_HBM0)`: the tag is the chip's coordinates, not an ordinal.
- TPU compiler: `Ran out of memory in memory space hbm. Used 21.90G of 7.48G hbm.`: what the whole program
  needs, not one allocation.
- CPU: `Out of memory allocating 4398046511104 bytes.`

A size as XLA prints it (tsl's HumanReadableNumBytes: "512.0KiB", "4.00TiB"; the TPU runtime's "15.65G") is
base 1024 and exact only to its last digit: where the message also carries a byte count that agrees with it, the
byte count is taken.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Literal, NamedTuple

_UNITS = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
# Where the message of an out-of-memory status begins: its first phrase after this is the request (a later
# "BufferAssignment OOM Debugging" block lists other sizes).
_STATUS = re.compile(r"RESOURCE_EXHAUSTED|Resource exhausted|XLA:TPU compile permanent error", re.IGNORECASE)

Family = Literal["gpu_bfc", "gpu_bfc_log", "gpu_platform", "gpu_async", "tpu_runtime", "tpu_compile", "cpu", "other"]
# The families whose ordinal is a GPU's (CUDA or ROCm) local device ordinal.
GPU_FAMILIES = frozenset({"gpu_bfc", "gpu_bfc_log", "gpu_platform", "gpu_async"})


def _size(name: str) -> str:
    """A size as the messages write it, as the groups `name` (the number) and `name`_unit."""
    return rf"(?P<{name}>\d+(?:[.,]\d+)?)\s?(?P<{name}_unit>[KMGTPE](?:iB|B)?|B|bytes)\b"


_PATTERNS: tuple[tuple[Family, re.Pattern[str]], ...] = (
    ("gpu_bfc", re.compile(
        r"Out of (?P<host>host )?memory while trying to allocate " + _size("num")
        + r"(?: with allocator (?P<alloc>\w+)(?: on device (?P<dev>\d+))?)?")),
    ("gpu_platform", re.compile(
        r"Failed to allocate request for " + _size("num") + r"(?:\s*\((?P<exact>\d+)\s?B\))?(?: on device ordinal (?P<dev>\d+))?")),
    ("gpu_async", re.compile(r"gpu_async_(?P<dev>\d+)\b[^\n]*?failed to allocate (?P<exact>\d+) bytes")),
    ("gpu_bfc_log", re.compile(
        r"Allocator \((?P<alloc>\w+)\) ran out of memory trying to allocate " + _size("num") + r"(?: \(rounded to (?P<exact>\d+)\))?")),
    ("tpu_runtime", re.compile(
        r"Attempting to allocate " + _size("num") + r"\.? That was not possible\."
        r"(?: There are " + _size("free") + r" free\.)?(?:;?\s*\((?P<tag>[^)\s]*)\))?")),
    ("tpu_compile", re.compile(
        r"Ran out of memory in memory space (?P<space>\w+)\.\s*Used " + _size("num") + " of " + _size("cap"))),
    ("cpu", re.compile(r"Out of memory allocating (?P<exact>\d+) bytes")),
    ("other", re.compile(r"allocat\w*\s+(?P<exact>\d+)\s+bytes")),
)  # fmt: skip
# Byte counts elsewhere in the text that may say a rounded request exactly (a chained log line, the BFC's own).
_EXACT = (
    re.compile(r"\(rounded to (?P<exact>\d+)\)"),
    re.compile(r"\((?P<exact>\d+)\s?B\)"),
    re.compile(r"(?:gpu_async_(?P<dev>\d+)\b[^\n]*?)?failed to allocate (?P<exact>\d+) bytes"),
    re.compile(r"allocat\w*\s+(?P<exact>\d+)\s+bytes"),
)


class OomRequest(NamedTuple):
    """What an out-of-memory message says was asked for; every field None where it does not say."""

    requested_bytes: int | None
    exact: bool  # the message gave the byte count; False: a size as XLA prints it, exact to its last digit only
    device_ordinal: int | None  # the local device ordinal the message names (GPU messages only)
    family: Family | None  # which message it was (None: not one devctl knows)
    scope: Literal["allocation", "program"] | None  # "program": the TPU compiler's figure, all that the program needs
    memory: str | None  # "pinned_host" (CUDA's "Out of host memory"), "hbm"; None where the message does not say
    free_bytes: int | None  # what the message says was free (the TPU runtime's "There are 11.08G free")
    capacity_bytes: int | None  # what the message says the memory holds (the TPU compiler's "Used X of Y")


NOTHING = OomRequest(None, False, None, None, None, None, None, None)
# A figure a message can carry: a size below 2**63 bytes, written in at most this many characters. Anything
# else (a 5000-digit count, which int() refuses, or 1e30 bytes) is no request the job made: the message says none.
_FIGURE_LIMIT = 1 << 63
_FIGURE_CHARS = 24


def size_bytes(number: str, unit: str) -> tuple[int, int]:
    """(bytes, the uncertainty of the figure in bytes: one unit of its last digit) of "4.00" "TiB", base 1024."""
    number = number.replace(",", ".")
    scale = 1 if unit in ("B", "bytes") else 1024 ** _UNITS[unit[0]]
    decimals = len(number.partition(".")[2])
    return round(Fraction(number) * scale), scale // 10**decimals


def parse_oom(message: str) -> OomRequest:
    """The request of an out-of-memory message (several chained messages may be joined with newlines, the
    outermost first): the first known phrase after the status code, else the first anywhere."""
    try:
        found = _parse(message)
    except (ValueError, KeyError, ZeroDivisionError):  # a figure past what a size is (int() refuses 5000 digits)
        return NOTHING
    if found.requested_bytes is None or not 0 <= found.requested_bytes < _FIGURE_LIMIT:
        return NOTHING
    within = [v if v is None or 0 <= v < _FIGURE_LIMIT else None for v in (found.free_bytes, found.capacity_bytes)]
    return found._replace(free_bytes=within[0], capacity_bytes=within[1])


def _parse(message: str) -> OomRequest:
    if not message:
        return NOTHING
    status = _STATUS.search(message)
    found = _first(message, status.start() if status else 0) or (_first(message, 0) if status else None)
    if found is None:
        return NOTHING
    family, m = found
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    if any(len(v) > _FIGURE_CHARS for k, v in groups.items() if k in ("dev", "exact", "num", "free", "cap")):
        return NOTHING
    device = int(groups["dev"]) if "dev" in groups else _allocator_ordinal(groups.get("alloc"))
    if "exact" in groups:
        requested, exact = int(groups["exact"]), True
    elif groups.get("num_unit") in ("B", "bytes") and groups["num"].isdigit():
        requested, exact = int(groups["num"]), True
    else:
        requested, spread = size_bytes(groups["num"], groups["num_unit"])
        exact = False
        better = _agreeing_count(message, requested, spread)
        if better is not None:
            requested, exact = better[0], True
            if device is None and family in GPU_FAMILIES:
                device = better[1]
    memory = None
    if groups.get("host"):
        memory, device = "pinned_host", None  # the host's pinned memory: no device of the ordinal's
    elif family == "tpu_compile":
        memory = groups["space"]
    elif "HBM" in groups.get("tag", ""):
        memory = "hbm"
    free = size_bytes(groups["free"], groups["free_unit"])[0] if "free" in groups else None
    capacity = size_bytes(groups["cap"], groups["cap_unit"])[0] if "cap" in groups else None
    if family not in GPU_FAMILIES:
        device = None  # a TPU's tag is coordinates, and the CPU names none
    scope: Literal["allocation", "program"] = "program" if family == "tpu_compile" else "allocation"
    return OomRequest(requested, exact, device, family, scope, memory, free, capacity)


def _first(message: str, start: int) -> tuple[Family, re.Match[str]] | None:
    best: tuple[Family, re.Match[str]] | None = None
    for family, pattern in _PATTERNS:
        m = pattern.search(message, start)
        if m is not None and (best is None or m.start() < best[1].start()):
            best = (family, m)
    return best


def _allocator_ordinal(name: str | None) -> int | None:
    """The ordinal in a BFC allocator's name: GPU_0_bfc (device memory); GPU_host_bfc and the like name none."""
    m = re.fullmatch(r"GPU_(\d+)_bfc", name or "")
    return int(m.group(1)) if m else None


def _agreeing_count(message: str, shown: int, spread: int) -> tuple[int, int | None] | None:
    """(bytes, ordinal) of the first byte count in the message that agrees with a size shown as `shown` +- `spread`."""
    for pattern in _EXACT:
        for m in pattern.finditer(message):
            if len(m.group("exact")) > _FIGURE_CHARS:
                continue
            n = int(m.group("exact"))
            if abs(n - shown) <= spread:
                dev = m.groupdict().get("dev")
                return n, int(dev) if dev is not None else None
    return None
