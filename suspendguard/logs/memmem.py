"""A needle found in a buffer in place, by the C library's memmem where there is one."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

# A window: bytes, or the buffer the reader reads into.
Data = bytes | bytearray
Find = Callable[[bytes, int, int], int]


def _libc_memmem() -> Callable[[int, int, bytes, int], int | None] | None:
    """The C library's memmem, or None where there is none (then bytes.find serves).

    glibc's shifts by pairs of bytes, where bytes.find shifts by one byte
    folded into 64 buckets: on log text it skips about twice as far, and each
    needle pass over a window costs half as much (benchmarks/logs_throughput.py).
    """
    try:
        fn = ctypes.CDLL(None).memmem
    except (OSError, AttributeError):  # pragma: no cover - a libc without memmem
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t)
    return fn


_MEMMEM = _libc_memmem()


def finder(buf: Data) -> Find:
    """``find(needle, pos, hi)``: the offset of ``needle`` in ``buf[pos:hi]``, or -1.

    The same answer as ``buf.find(needle, pos, hi)``, by memmem where there
    is one. It reads ``buf`` in place through its address, so the bounds are
    clamped to the buffer first: memmem never sees a byte outside it.
    """
    memmem = _MEMMEM
    if memmem is None:
        return buf.find
    if isinstance(buf, bytearray):
        # The address holds while ``buf`` lives, unresized: read_file never
        # resizes its buffer (it makes a new one), and ``find`` keeps ``buf``.
        base = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    else:
        base = ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0
    size = len(buf)

    def find(needle: bytes, pos: int, hi: int) -> int:
        pos, hi = max(pos, 0), min(hi, size)
        if not needle or hi - pos < len(needle):
            return buf.find(needle, pos, hi)
        at = memmem(base + pos, hi - pos, needle, len(needle))
        return -1 if at is None else at - base

    return find
