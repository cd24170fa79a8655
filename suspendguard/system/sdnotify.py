"""sd_notify(3) without libsystemd: one datagram to ``$NOTIFY_SOCKET`` per state change.

A ``Type=notify`` service tells systemd ``READY=1`` once it is up,
``STATUS=...`` for ``systemctl status``, and ``WATCHDOG=1`` at least every
half ``WatchdogSec=`` (systemd hands that as ``$WATCHDOG_USEC``, for
``$WATCHDOG_PID``). The socket is an ``AF_UNIX`` datagram socket; a name
starting with ``@`` is in the abstract namespace (a leading NUL). Outside
systemd (no ``$NOTIFY_SOCKET``) every call does nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping


class Notifier:
    """The service manager's notification socket, or nothing when there is none."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET", "")
        self.address: str | bytes | None = None
        if path.startswith("@"):
            self.address = b"\0" + path[1:].encode()
        elif path.startswith("/"):
            self.address = path
        self.watchdog_s = _watchdog_s(env)
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str) -> bool:
        """``READY="1"``, ``STATUS="..."``: one datagram; False when it could not be sent."""
        if self.address is None:
            return False
        text = "\n".join(f"{k}={' '.join(v.splitlines())}" for k, v in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(text.encode(), self.address)
        except OSError:
            return False  # systemd gone or restarting: the service goes on regardless
        return True

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None


def _watchdog_s(env: Mapping[str, str]) -> float | None:
    """The watchdog period asked for this process, in seconds; None when none."""
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    pid = env.get("WATCHDOG_PID")
    if usec <= 0 or (pid and pid != str(os.getpid())):
        return None
    return usec / 1e6
