"""The message on the users' login terminals, as wall(1) writes it, from logind's sessions.

Not wall itself: run by root, util-linux wall writes even to a terminal
whose user said ``mesg n``, it finds terminals through utmp (which logind's
sessions need not be in) and it cannot pick users by name. Here each text
session's TTY, as logind keeps it, is written once (however many sessions
name it) and only when it is a character device under /dev/pts or a
/dev/ttyN-like name, owned by the user of one of those sessions, with its
group-write bit set (``mesg y``). It is opened without following
a link, without becoming the guard's controlling terminal and without
blocking: a terminal that takes no more output (stopped with ^S, a full
buffer) loses the rest of the message rather than holding the guard.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import stat
import time
from collections.abc import Sequence

# logind's TTY values this writes to: "pts/3", "tty2", "ttyS0" (never "tty" alone).
_TTY = re.compile(r"(?:pts/[0-9]+|tty[A-Za-z]*[0-9]+)")


def write_terminal(tty: str, uids: Sequence[int], text: str, until: float) -> str | None:
    """``text`` written to /dev/``tty`` when one of ``uids`` (the users of the sessions
    that name it) owns it; why not, or None once it was written whole."""
    if not _TTY.fullmatch(tty):
        return f"{tty!r} is not a terminal name this writes to"
    folder, _, name = f"dev/{tty}".rpartition("/")
    try:
        dir_fd = os.open("/" + folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        return f"/{folder}: {e.strerror}"
    try:
        return _write_in(dir_fd, name, tty, uids, text, until)
    finally:
        os.close(dir_fd)


def _write_in(dir_fd: int, name: str, tty: str, uids: Sequence[int], text: str,
              until: float) -> str | None:
    path = f"/dev/{tty}"
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as e:
        return f"{path}: {e.strerror}"
    refused = _refused(before, uids)
    if refused:
        return f"{path}: {refused}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | os.O_NOFOLLOW
                     | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        return f"{path}: {e.strerror}"
    try:
        now = os.fstat(fd)
        if now.st_rdev != before.st_rdev or _refused(now, uids):
            return f"{path}: changed while it was opened"
        return _write_all(fd, path, text.encode("utf-8", "replace"), until)
    finally:
        os.close(fd)


def _refused(st: os.stat_result, uids: Sequence[int]) -> str:
    if not stat.S_ISCHR(st.st_mode):
        return "not a character device"
    if st.st_uid not in uids:
        if len(uids) == 1:
            return f"owned by uid {st.st_uid}, not by the session's user (uid {uids[0]})"
        return (f"owned by uid {st.st_uid}, not by a user of its sessions "
                f"(uids {', '.join(map(str, uids))})")
    if not st.st_mode & stat.S_IWGRP:
        return "messages refused (mesg n)"
    return ""


def _write_all(fd: int, path: str, data: bytes, until: float) -> str | None:
    while data:
        try:
            data = data[os.write(fd, data):]
            continue
        except BlockingIOError:
            pass
        except OSError as e:
            return f"{path}: {e.strerror}"
        left = until - time.monotonic()
        if left <= 0:
            return f"{path}: takes no more output (stopped?); the message was cut"
        with contextlib.suppress(InterruptedError):
            select.select([], [fd], [], min(left, 0.05))
    return None
