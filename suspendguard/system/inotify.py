"""inotify(7) through libc (ctypes): the opens and closes of a set of files, as one pollable fd.

The standard library has no inotify. The kernel sends ``IN_OPEN`` when any
process opens a watched file and ``IN_CLOSE_WRITE``/``IN_CLOSE_NOWRITE`` when
the last reference to an open file goes (its fd closed in every process that
shares it, a mapping of it gone): for a device node, a job that starts using
it and a holder that lets go. Only opens through the watched inode are seen:
a node made again elsewhere (a container's own ``mknod``, another path to the
same device number) goes unseen, which is why the caller also looks on a
bound.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Iterable

IN_OPEN = 0x00000020
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_CLOSE_WRITE = 0x00000008
IN_CLOSE_NOWRITE = 0x00000010
IN_ATTRIB = 0x00000004
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_IGNORED = 0x00008000
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# What a holder does to a node, and the node itself going away.
NODE_EVENTS = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_DELETE_SELF | IN_MOVE_SELF
# A file of a watched folder made, written, renamed in or out, or removed.
FOLDER_EVENTS = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


class Inotify:
    """One inotify instance watching a set of paths; ``fd`` polls readable when something
    happened to one of them."""

    def __init__(self, mask: int = NODE_EVENTS) -> None:
        fd = _lib().inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd
        self.mask = mask
        self.watches: dict[str, int] = {}  # path -> watch descriptor

    def watch(self, paths: Iterable[str]) -> list[str]:
        """Watch exactly ``paths`` (those no longer named are dropped); the ones that could
        not be watched, each with why."""
        wanted = list(dict.fromkeys(paths))
        failed: list[str] = []
        for path in set(self.watches) - set(wanted):
            wd = self.watches.pop(path)
            if wd not in self.watches.values():
                _lib().inotify_rm_watch(self.fd, wd)  # EINVAL once the kernel dropped it
        for path in wanted:
            if path in self.watches:
                continue
            wd = _lib().inotify_add_watch(self.fd, os.fsencode(path), self.mask)
            if wd < 0:
                err = ctypes.get_errno()
                failed.append(f"{path}: {os.strerror(err)}")
                continue
            self.watches[path] = wd
        return failed

    def read(self) -> list[tuple[str, int]]:
        """The events waiting, as (path, mask); [] when none. An event of a file in a watched
        folder names that file's path. A watch the kernel dropped (the node deleted) is
        forgotten, so the next :meth:`watch` adds it again."""
        events: list[tuple[str, int]] = []
        by_wd = {wd: path for path, wd in self.watches.items()}
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return events
            if not data:
                return events
            at = 0
            while at + _EVENT.size <= len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0")
                at += _EVENT.size + length
                path = by_wd.get(wd, "")
                events.append((os.path.join(path, os.fsdecode(name)) if name else path, mask))
                if mask & IN_IGNORED and path:
                    self.watches.pop(path, None)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.watches.clear()
