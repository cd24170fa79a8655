"""One structured message to journald, with fields a plain log line cannot carry.

journald's native protocol: a datagram of ``FIELD=value`` lines on its
socket (a value with a newline goes as the field name, a newline, its
length as 64-bit little-endian, and the bytes). Used for the messages an
operator filters on by ``MESSAGE_ID`` (``journalctl MESSAGE_ID=...``). No
journald (a container, a test) is not an error: the message is also logged.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping

SOCKET = "/run/systemd/journal/socket"


def encode(fields: Mapping[str, str]) -> bytes:
    out = bytearray()
    for name, value in fields.items():
        data = value.encode("utf-8", "replace")
        if b"\n" in data:
            out += name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += name.encode() + b"=" + data + b"\n"
    return bytes(out)


def send(fields: Mapping[str, str], path: str | None = None) -> bool:
    """Send one entry; False when there is no journald to take it."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(encode(fields), path or SOCKET)
    except OSError:
        return False
    return True
