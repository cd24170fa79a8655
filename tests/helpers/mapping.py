"""A mapping of a device node with no fd kept: how a job holds a node by its memory alone."""

from __future__ import annotations

import ctypes
import mmap


def map_page(fd: int) -> None:
    """Map one page of ``fd`` read-only with libc's mmap, which keeps no dup of the fd (Python's
    mmap object does): closed, the fd leaves the node held by the mapping alone."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    addr = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
