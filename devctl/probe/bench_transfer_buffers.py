"""What `devctl bench transfer` measures with: host buffers filled with a pattern, the aliasing test that tells a
copy from a zero-copy view, and the statistics of a cell's samples."""

from __future__ import annotations

# A prime period, so a shard or page landing at the wrong offset never matches the expected bytes by accident.
PATTERN_PERIOD = 65521


class HostBuffers:
    """The host side of one size: a pattern-filled source placed like a numpy array, and a warm memcpy target."""

    def __init__(self, np, size: int):
        self.np, self.size = np, size
        # numpy's large arrays start 16 bytes into a page (malloc's header); XLA's CPU client aliases
        # 64-byte-aligned ones instead of copying. Placing the source at 16 mod 64 makes every size
        # behave like an ordinary numpy array, not alias at random when malloc happens to align it.
        self.pattern = placed(np, size, align=64, offset=16)
        fill_pattern(np, self.pattern)
        # Placed as the pattern is, so memcpy meets both at the same alignment (its fastest case).
        self.memcpy_dst = placed(np, size, align=64, offset=16)
        self.memcpy_dst.fill(0)  # touch every page now, not inside the timing
        self._aligned = None

    def aligned(self):
        if self._aligned is None:
            self._aligned = placed(self.np, self.size, align=4096, offset=0)
            self.np.copyto(self._aligned, self.pattern)
        return self._aligned


def placed(np, size: int, *, align: int, offset: int):
    raw = np.empty(size + 2 * align, dtype=np.uint8)
    start = (offset - raw.ctypes.data) % align
    return raw[start : start + size]


def fill_pattern(np, buf) -> None:
    block = ((np.arange(PATTERN_PERIOD, dtype=np.uint64) * 2654435761) >> 13).astype(np.uint8)
    whole = buf.shape[0] // PATTERN_PERIOD
    if whole:
        buf[: whole * PATTERN_PERIOD].reshape(whole, PATTERN_PERIOD)[:] = block
    tail = buf.shape[0] - whole * PATTERN_PERIOD
    buf[whole * PATTERN_PERIOD :] = block[:tail]


def ranges(obj) -> list[tuple[int, int]]:
    """(address, nbytes) of every buffer behind a numpy or jax array; [] where the address is not exposed."""
    if obj is None:
        return []
    ctypes = getattr(obj, "ctypes", None)
    if ctypes is not None:  # numpy
        return [(ctypes.data, obj.nbytes)]
    try:
        return [(s.data.unsafe_buffer_pointer(), s.data.nbytes) for s in obj.addressable_shards]
    except Exception:
        return []


def overlaps(a: list, b: list) -> bool:
    return any(p < q + nq and q < p + np_ for p, np_ in a for q, nq in b)


def moved_bytes(result: list, sources: list) -> int:
    """Bytes of the result that are not the source's own memory."""
    return sum(n for p, n in result if not overlaps([(p, n)], sources))
