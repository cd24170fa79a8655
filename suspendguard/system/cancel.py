"""Stopping the guard itself: a flag plus a pipe that wakes any poll()."""

from __future__ import annotations

import contextlib
import os


class Cancel:
    """Set when the guard itself is told to stop (SIGTERM); wakes any poll()."""

    def __init__(self) -> None:
        self.reason = ""
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @property
    def fd(self) -> int:
        return self._r

    @property
    def cancelled(self) -> bool:
        return bool(self.reason)

    def cancel(self, reason: str) -> None:
        self.reason = self.reason or reason
        with contextlib.suppress(OSError):
            os.write(self._w, b"x")

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
