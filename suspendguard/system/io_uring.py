"""What an io_uring holds: its registered files, as /proc/PID/fdinfo/FD names them.

A process may register a file with its ring (``IORING_REGISTER_FILES``) and
close the fd it opened it with: the ring keeps the file open, and neither
/proc/PID/fd nor /proc/PID/maps shows it any more. The ring's fdinfo lists
each registered file under ``UserFiles: COUNT``, one line ``INDEX: PATH``
(``<none>`` for an empty slot), the path escaped as seq_file_path escapes it
(a space, tab, newline or backslash as ``\\ooo``). Before Linux 6.14 the line
names the file by its last name alone (its dentry's, ``d_iname``: ``0: davinci0``),
and the list is left out while the ring's lock is taken (a ring at work): only the
count is there; from 6.15 such a ring's fdinfo shows nothing of the ring at all.
"""

from __future__ import annotations

import os
import re

_SLOT = re.compile(rb"^\s*\d+: (.*)$")
_ESCAPE = re.compile(rb"\\([0-7]{3})")
_COUNT = re.compile(rb"^UserFiles:\s*(\d+)", re.M)


def _user_files(fdinfo: bytes) -> tuple[int | None, list[bytes]]:
    """The ``UserFiles:`` count (None: no such line) and what each slot line after it says."""
    m = _COUNT.search(fdinfo)
    if m is None:
        return None, []
    listed = []
    for line in fdinfo[m.end():].split(b"\n")[1:]:
        slot = _SLOT.match(line)
        if slot is None:
            break
        listed.append(slot.group(1))
    return int(m.group(1)), listed


def unlisted(fdinfo: bytes, release: str | None = None) -> bool:
    """Whether a ring's fdinfo may leave out files registered with it (``release``: the
    kernel's, this one's when None). A list that is there is whole in every kernel: each slot
    before 6.14 (``<none>`` for an empty one), each slot in use from 6.14. So it is unlisted
    where there is no ``UserFiles:`` (from 6.15, and 6.14.8, a ring whose lock is taken shows
    nothing), or where a count over 0 lists nothing: before those the lock was taken; from
    them that is a sparse table with nothing in it yet."""
    count, listed = _user_files(fdinfo)
    if count is None:
        return True
    if count == 0 or listed:
        return False
    return kernel_version(release or os.uname().release) < (6, 14, 8)


def kernel_version(release: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a kernel release (``6.18.44-fc-v1252``); 0s where unreadable."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else (0, 0, 0)


def registered_files(fdinfo: bytes) -> list[str]:
    """What the ring whose fdinfo this is names of each file registered with it: its path,
    or before Linux 6.14 its last name alone."""
    return [os.fsdecode(_ESCAPE.sub(lambda e: bytes([int(e.group(1), 8)]), slot))
            for slot in _user_files(fdinfo)[1] if slot != b"<none>"]
