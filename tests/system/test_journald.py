"""One structured journal entry over journald's native protocol, to a real datagram socket."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from suspendguard.system import journald


def test_fields_arrive_and_a_value_with_a_newline_is_length_prefixed(tmp_path: Path) -> None:
    path = str(tmp_path / "socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        assert journald.send({"MESSAGE_ID": "abc", "MESSAGE": "two\nlines"}, path)
        data = sock.recv(65536)
    text = b"two\nlines"
    assert data == (b"MESSAGE_ID=abc\n" + b"MESSAGE\n" + struct.pack("<Q", len(text)) + text
                    + b"\n")


def test_no_journald_is_not_an_error(tmp_path: Path) -> None:
    assert journald.send({"MESSAGE": "x"}, str(tmp_path / "nobody-listens")) is False
