"""Sizes, durations and rates: parsing what users type, formatting what they read."""

from __future__ import annotations

import re

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from '4K', '64M', '1G', '40GiB', '10GB', '4096'.

    A bare suffix ('K', 'M', 'G') and the IEC form ('KiB') are binary, as in
    `head -c`; an explicit 'KB'/'MB'/'GB' is decimal. Raises ValueError.
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use a number with an optional K, M, G, T suffix, e.g. 64M)")
    number, prefix, iec, b = m.groups()
    prefix = prefix.lower()
    decimal = bool(b) and not iec and prefix != ""
    value = float(number) * (_DECIMAL if decimal else _BINARY)[prefix]
    if value != int(value):
        raise ValueError(f"not a whole number of bytes: {text!r}")
    return int(value)


def parse_rate_gbps(text: str) -> float:
    """GB/s (decimal) from '10GB/s', '10 GB/s', '10'. Raises ValueError."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(?:GB/s|GB|G)?\s*$", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"not a rate: {text!r} (use GB/s, e.g. 10GB/s)")
    return float(m.group(1))


def format_bytes(n: float | int | None) -> str:
    """'1.5 GiB'; None as '-'."""
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def format_size_short(n: int) -> str:
    """'4K', '64M', '1G' for sizes that are whole binary units, else bytes."""
    for suffix, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def format_seconds(s: float | None) -> str:
    """'12.3 us', '4.56 ms', '1.23 s'; None as '-'."""
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of an already sorted list."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
