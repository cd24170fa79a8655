"""Room kept for an attempt: a small file in the state folder, given up when the disk fills.

A job that writes its checkpoint while it exits can fill the disk between
the attempt's first row and its verdict; SQLite then cannot write the
verdict, and the attempt later reads as a guard killed before it gave one.
A disk already full when the attempt begins would keep it from writing
down whom it signals, and the next attempt would signal them again. While
there is room, each attempt makes sure this file exists (allocated, not
sparse); when the history's open (a disk full while the history was
closed), the attempt's first row, whom it signals or its verdict finds the
disk full, the file is removed and the write tried once more in the room it
leaves. The room is given once: what finds the disk full after it is not
written.
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


def full(state_dir: str, exc: HistoryError) -> bool:
    """Whether ``exc`` came of a full disk: SQLite says so; or, failing to grow its
    shared-memory file (a history opened with none left by the last close), it says "disk
    I/O error", and the filesystem has less room left for this user than the reserve."""
    if "full" in str(exc):
        return True
    if "disk I/O error" not in str(exc):
        return False
    try:
        fs = os.statvfs(state_dir)
    except OSError:
        return False
    free = fs.f_bfree if os.geteuid() == 0 else fs.f_bavail  # root has ext4's reserved blocks
    return free * fs.f_frsize < RESERVE_BYTES


def in_reserve(state_dir: str, write: Callable[[], T]) -> T:
    """``write()``; when it finds the disk full, tried once more in the reserve's room (the
    HistoryError stands where there is no reserve left to give)."""
    try:
        return write()
    except HistoryError as exc:
        if not full(state_dir, exc) or not release(state_dir):
            raise
    return write()
