"""Who answers at a manager's private socket.

A manager's private socket sits in its runtime folder (/run/user/UID for a
user's manager), which that folder's owner may change at will: a link there
to PID 1's own socket would have root's guard start and reload units on the
system manager, as that user names them. The process that answers must run
as the folder's owner, which the kernel tells (SO_PEERCRED).
"""

from __future__ import annotations

import os
import socket
import struct


def stranger(sock: socket.socket, address: str) -> str | None:
    """Why the process at the other end of ``sock`` (connected to ``address``, a
    ``unix:path=`` address) is not the owner of the socket's runtime folder; None when it is."""
    path = next((part.removeprefix("path=") for part in
                 address.removeprefix("unix:").split(",") if part.startswith("path=")), "")
    folder = os.path.dirname(os.path.dirname(path))  # .../systemd/private
    try:
        owner = os.stat(folder).st_uid
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError as e:
        return f"cannot be told apart from another process ({e.strerror or e})"
    pid, uid, _ = struct.unpack("3i", creds)
    if uid != owner:
        return f"is answered by pid {pid} as uid {uid}, not by {folder}'s owner (uid {owner})"
    return None
