"""A user's text session on a real pseudo-terminal, as a fake logind lists it (helpers/dbus.py)."""

from __future__ import annotations

import contextlib
import os
import pty
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def tty_session(name: str = "alice", session_id: str = "4") -> Iterator[tuple[int, dict[str, Any]]]:
    """A real pseudo-terminal that takes messages (mesg y: mode 0620), and the session of this
    uid on it, as logind's ``sessions`` list has it: the terminal's master fd, to read what
    was written there, and the session."""
    master, slave = pty.openpty()
    tty = os.ttyname(slave)
    os.chmod(tty, 0o620)
    session = {"id": session_id, "uid": os.getuid(), "name": name, "type": "tty",
               "tty": tty.removeprefix("/dev/")}
    try:
        yield master, session
    finally:
        os.close(slave)
        os.close(master)


def written(master: int) -> str:
    """What was written to the terminal since the last read; "" when nothing was."""
    os.set_blocking(master, False)
    with contextlib.suppress(BlockingIOError):
        return os.read(master, 65536).decode()
    return ""
