"""Sizes, durations and rates: parsing what users type, formatting what they read."""

from __future__ import annotations

import re

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
# ASCII digits only, and at most 20 of them before the point: '²' or 10,000 nines are not sizes, and
# int() of a long digit string would hit Python's 4300-digit limit with a traceback.
_NUMBER = r"(\d{1,20})(?:\.(\d{1,20}))?"
_SIZE_RE = re.compile(rf"^\s*{_NUMBER}\s*([kmgt]?)(i?)(b?)\s*$", re.IGNORECASE | re.ASCII)


def parse_size(text: str) -> int:
    """Bytes from '4K', '64M', '1G', '40GiB', '10GB', '4096'.

    A bare suffix ('K', 'M', 'G') and the IEC form ('KiB') are binary, as in
    `head -c`; an explicit 'KB'/'MB'/'GB' is decimal. Raises ValueError.
    """
    m = _SIZE_RE.match(text)
    if not m:
        raise ValueError(f"not a size: {_q(text)} (use a number with an optional K, M, G, T suffix, e.g. 64M)")
    whole, frac, prefix, iec, b = m.groups()
    prefix = prefix.lower()
    decimal = bool(b) and not iec and prefix != ""
    unit = (_DECIMAL if decimal else _BINARY)[prefix]
    # In integers: no float rounding, and no overflow to inf for a long number.
    frac = frac or ""
    scaled, den = int(whole + frac) * unit, 10 ** len(frac)
    if scaled % den:
        raise ValueError(f"not a whole number of bytes: {_q(text)}")
    return scaled // den


# Rates: B is a byte and b a bit, as on every data sheet; 'bit' and 'bits' are bits whatever the case.
# What could be either ('10G', '10gb/s') is refused rather than guessed.
_RATE_RE = re.compile(
    r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([kKmMgGtT]?)((?<=[kKmMgGtT])[iI])?(B|b|bits?|BITS?|Bits?)?\s*(/\s*s|ps)?\s*$", re.ASCII
)
RATE_HELP = "a rate such as 10GB/s (gigabytes), 80Gb/s or 80Gbit/s (gigabits) or 9.3GiB/s; a bare number is GB/s"


def parse_rate_gbps(text: str) -> float:
    """Decimal GB/s from '10GB/s', '10 GB/s', '80Gb/s', '80Gbit/s', '80Gbps', '9.3GiB/s', '500MB/s', '10'.

    A bare number is GB/s (the unit devctl prints). Raises ValueError naming what is accepted.
    """
    m = _RATE_RE.match(text)
    if not m:
        raise ValueError(f"not a rate: {_q(text)}; give {RATE_HELP}")
    number, prefix, iec, unit, per_second = m.groups()
    if unit is None:
        if per_second and not prefix:
            raise ValueError(f"not a rate: {_q(text)}; give {RATE_HELP}")
        if prefix:
            raise ValueError(_ambiguous(text, number, prefix + (iec or "")))
        return float(number)
    if unit == "b" and prefix in ("m", "g", "t"):
        raise ValueError(_ambiguous(text, number, prefix + (iec or "")))
    bits = unit != "B"
    scale = (_BINARY if iec else _DECIMAL)[prefix.lower()]
    return float(number) * scale / (8 if bits else 1) / 1e9


def _ambiguous(text: str, number: str, prefix: str) -> str:
    # '10G' is ten gigabits on a network card and ten gigabytes to others; 'gb' has neither case right.
    p = prefix[0].upper() + prefix[1:].lower()
    return f"ambiguous rate {_q(text)}: write {number}{p}B/s for bytes or {number}{p}bit/s for bits"


def _q(text: str) -> str:
    """The text quoted in an error, cut short: a 100,000-character argument must not become the message."""
    return repr(text) if len(text) <= 60 else f"{text[:60]!r}... ({len(text)} characters)"


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


def figure(value: float | None) -> str:
    """GB/s or TFLOP/s as people read them: 2905, 51.2, 2.20, 0.0680 (never 2.9e+03; three figures, trailing zeros
    kept, so that a column's figures read alike)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.{digits(value)}f}" if value >= 10 else f"{value:#.3g}"


def digits(value: float | None) -> int:
    """Decimals that keep three significant figures for a figure of this size (at least none)."""
    if not value or value >= 100:
        return 0
    if value >= 10:
        return 1
    return 3 if value < 1 else 2


def counted(n: int, one: str, many: str | None = None) -> str:
    """A count with its noun, singular or plural as English has it: '1 live array', '3 live arrays', '1 process'."""
    return f"{n} {one if n == 1 else many or one + 's'}"
