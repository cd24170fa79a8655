"""Room kept for the verdict: a small file in the state folder, given up when the disk fills.

A job that writes its checkpoint while it exits can fill the disk between
the attempt's first row and its verdict; SQLite then cannot write the
verdict, and the attempt later reads as a guard killed before it gave one.
While there is room, each attempt makes sure this file exists (allocated,
not sparse); when the verdict finds the disk full, the file is removed and
the write tried once more in the room it leaves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import TypeVar

from suspendguard.errors import HistoryError

T = TypeVar("T")

RESERVE_NAME = "history.reserve"
RESERVE_BYTES = 1 << 20  # a verdict with its holder rows needs a few pages of the WAL


def keep(state_dir: str) -> None:
    """Make sure the reserve exists; quietly nothing when there is no room for it now."""
    path = os.path.join(state_dir, RESERVE_NAME)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        if os.fstat(fd).st_blocks * 512 < RESERVE_BYTES:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)  # a part-allocated reserve only takes room from others
    finally:
        os.close(fd)


def release(state_dir: str) -> bool:
    """Give the reserve's room back to the filesystem; True when there was one."""
    try:
        os.unlink(os.path.join(state_dir, RESERVE_NAME))
    except OSError:
        return False
    return True


def in_reserve(state_dir: str, write: Callable[[], T]) -> T:
    """``write()``; when it finds the disk full, tried once more in the reserve's room (the
    HistoryError stands where there is no reserve left to give)."""
    try:
        return write()
    except HistoryError as exc:
        if "full" not in str(exc) or not release(state_dir):
            raise
    return write()
