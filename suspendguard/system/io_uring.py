"""What an io_uring holds: its registered files, as /proc/PID/fdinfo/FD names them.

A process may register a file with its ring (``IORING_REGISTER_FILES``) and
close the fd it opened it with: the ring keeps the file open, and neither
/proc/PID/fd nor /proc/PID/maps shows it any more. The ring's fdinfo lists
each registered file under ``UserFiles:``, one line ``INDEX: PATH`` (``<none>``
for an empty slot), the path escaped as seq_file_path escapes it (a space,
tab, newline or backslash as ``\\ooo``).
"""

from __future__ import annotations

import os
import re

_SLOT = re.compile(rb"^\s*\d+: (.*)$")
_ESCAPE = re.compile(rb"\\([0-7]{3})")


def registered_files(fdinfo: bytes) -> list[str]:
    """The paths of the files registered with the ring whose fdinfo this is."""
    out: list[str] = []
    inside = False
    for line in fdinfo.split(b"\n"):
        if line.startswith(b"UserFiles:"):
            inside = True
            continue
        if not inside:
            continue
        m = _SLOT.match(line)
        if m is None:
            break
        if m.group(1) != b"<none>":
            path = _ESCAPE.sub(lambda e: bytes([int(e.group(1), 8)]), m.group(1))
            out.append(os.fsdecode(path))
    return out
