"""Opening untrusted log paths without following a symbolic link a user could have planted.

The guard runs as root and the logs lie in users' homes. So every path is
opened one component at a time relative to its parent's descriptor:
- the fixed start of a glob (``/home/alice/ascend/log``) may pass through a
  symlink only if root owns it (a user cannot create one);
- below that, no symlink is followed, file or directory, whoever owns it;
- files are opened O_NOFOLLOW | O_NONBLOCK and must be regular files (a FIFO
  would block the read forever).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Collection

MAX_SYMLINK_HOPS = 40

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(Exception):
    """A path not opened; the message is the reason the search reports.

    ``missing``: the path does not exist (a default glob's folder on a host
    without it), as against one there that could not be opened.
    """

    def __init__(self, reason: str, missing: bool = False) -> None:
        super().__init__(reason)
        self.missing = missing


def describe(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)


def _changed(exc: OSError) -> str:
    # A component swapped for a link between its stat and its open:
    # O_NOFOLLOW answers ELOOP (EMLINK on some systems), O_DIRECTORY ENOTDIR.
    if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
        return "replaced by a symbolic link while being opened, not followed"
    return describe(exc)


def open_base(path: str, links_of: Collection[int] = (0,)) -> tuple[int, bool]:
    """Open a path's fixed start component by component: (fd, is_directory).

    A symlink on the way is followed only when one of ``links_of`` owns it: root by
    default (users cannot make one there, so an administrator put it in place); also the
    user whose own path it is (a holder's log folder, whose owner is checked once opened).
    """
    queue = [p for p in path.split("/") if p and p != "."]
    queue.reverse()
    fd = os.open("/", _DIR_FLAGS)
    hops = 0
    try:
        while queue:
            name = queue.pop()
            last = not queue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise Refused(describe(exc), missing=exc.errno == errno.ENOENT) from None
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in links_of:
                    raise Refused(f"symbolic link owned by uid {st.st_uid} in the path, not followed")
                hops += 1
                if hops > MAX_SYMLINK_HOPS:
                    raise Refused("too many levels of symbolic links")
                try:
                    target = os.readlink(name, dir_fd=fd)
                except OSError as exc:  # removed or replaced since its stat
                    raise Refused(describe(exc)) from None
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", _DIR_FLAGS)
                queue.extend(reversed([p for p in target.split("/") if p and p != "."]))
                continue
            if stat.S_ISDIR(st.st_mode):
                new = open_dir(name, fd)
                os.close(fd)
                fd = new
                continue
            if not last:
                raise Refused(f"{name!r} in the path is not a directory")
            new = open_file(name, fd)
            os.close(fd)
            return new, False
        return fd, True
    except BaseException:
        os.close(fd)
        raise


def open_dir(name: str, dir_fd: int) -> int:
    """Open the folder ``name`` inside ``dir_fd``, not following a link."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(_changed(exc)) from None


def open_file(name: str, dir_fd: int) -> int:
    """Open the regular file ``name`` inside ``dir_fd``, not following a link."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(_changed(exc)) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("not a regular file")
    return fd


def open_relative(base_fd: int, rel: tuple[str, ...]) -> int:
    """Open base/rel... with no symlink followed anywhere below base."""
    fd = base_fd
    try:
        for name in rel[:-1]:
            new = open_dir(name, fd)
            if fd != base_fd:
                os.close(fd)
            fd = new
        return open_file(rel[-1], fd)
    finally:
        if fd != base_fd:
            os.close(fd)
