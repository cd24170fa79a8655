"""Real pseudo-terminals: a user's text session, as a fake logind lists it (helpers/dbus.py);
a command run on one, as an operator runs it."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import subprocess
import time
from collections.abc import Iterator, Mapping
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


def on_a_terminal(argv: list[str], answer: bytes | None, timeout: float = 30.0,
                  env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run argv with stdin, stdout and stderr on a new pseudo-terminal (in "/"), and give its
    question ("[y/N]") ``answer`` (None: leave it unanswered): its exit status and everything
    the terminal showed."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env={**(env or os.environ), "NO_COLOR": "1"}, cwd="/")
    os.close(slave)
    shown = b""
    answered = answer is None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every copy of the slave side is closed
                    break
                if not chunk:
                    break
                shown += chunk
            if not answered and b"[y/N]" in shown:
                assert answer is not None
                os.write(master, answer)
                answered = True
            if proc.poll() is not None and not ready:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, shown.decode(errors="replace").replace("\r\n", "\n")
