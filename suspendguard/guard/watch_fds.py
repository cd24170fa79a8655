"""What the watch (guard/watch.py) waits on: inotify's node events, told apart, and pidfds on holders."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from typing import NamedTuple

from suspendguard.system.inotify import IN_CLOSE_NOWRITE, IN_CLOSE_WRITE, IN_IGNORED, IN_OPEN
from suspendguard.system.procfs import ProcAccessError, ProcFS


class Seen(NamedTuple):
    """What happened between two reads of the watch's fds."""

    nodes: bool  # a node opened, closed or gone
    balanced: bool  # each node closed as often as it was opened, none gone
    exited: bool  # a holder exited, or the mode file changed


def node_events(events: Iterable[tuple[str, int]]) -> tuple[bool, bool]:
    """Whether inotify's ``events`` say anything of a node, and whether they balance: each node
    closed as often as opened (the kernel reports one close per open), nothing else. Balanced
    opens and closes are what a look's own do (an idle backend opens the nodes and lets go);
    a job that kept a node open, a holder that let go, a node gone, never balance."""
    seen, balanced = False, True
    count: dict[str, int] = {}
    for path, mask in events:
        if mask & IN_IGNORED and not path:
            continue  # a watch the watch itself removed: no node's doing
        seen = True
        if mask & IN_OPEN:
            count[path] = count.get(path, 0) + 1
        elif mask & (IN_CLOSE_WRITE | IN_CLOSE_NOWRITE):
            count[path] = count.get(path, 0) - 1
        else:  # the node gone or moved, or the kernel's queue overflowed
            balanced = False
    return seen, balanced and not any(count.values())


def pidfd_of(proc: ProcFS, pid: int, start: int) -> int | None:
    """A pidfd on the holder that was seen, None when there is none (then the bound covers it).

    Taken first and the start time confirmed after, so it names that process
    and no later one with its pid. A holder already gone gets a pidfd too: an
    exited process's pidfd is readable at once, so the next poll looks again.
    """
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return _gone()
    except OSError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            raise
        return None
    try:
        st = proc.stat(pid)
    except ProcAccessError:
        st = None
    if st is None or st.start_time != start:
        os.close(fd)
        return _gone()
    return fd


def _gone() -> int:
    """A readable fd (a pipe's read end, its write end closed): stands in for an exit."""
    r, w = os.pipe2(os.O_CLOEXEC)
    os.close(w)
    return r
