"""journald stood in for, and the guard's journal catalog read back.

A datagram socket standing where journald's is takes the guard's entries;
the catalog gives its entries by MESSAGE_ID and the @FIELD@ words each uses.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import REPO
from suspendguard.system import journald

CATALOG = REPO / "systemd" / "catalog" / "suspendguard.catalog"
HEADER = re.compile(r"^-- ([0-9a-f]{32})(?: \S+)?$")


@dataclass(frozen=True)
class Entry:
    id: str
    headers: dict[str, str]
    body: str

    def fields(self) -> set[str]:
        """The entry fields its text is filled in from (``@FIELD@``)."""
        text = "\n".join([*self.headers.values(), self.body])
        return set(re.findall(r"@([A-Z0-9_]+)@", text))


def parse(text: str | None = None) -> list[Entry]:
    """The catalog's entries in order, as systemd's docs/CATALOG.md describes the format."""
    text = CATALOG.read_text(encoding="utf-8") if text is None else text
    entries: list[Entry] = []
    current: str | None = None
    lines: list[str] = []

    def close() -> None:
        if current is None:
            return
        head, _, body = "\n".join(lines).partition("\n\n")
        headers = dict(line.split(": ", 1) for line in head.splitlines() if line)
        entries.append(Entry(current, headers, body.strip()))

    for line in text.splitlines():
        if line.startswith("#") and current is None:
            continue
        if line.startswith("-- "):
            match = HEADER.match(line)
            assert match, f"not a catalog entry header: {line!r}"
            close()
            current, lines = match.group(1), []
            continue
        assert current is not None or not line.strip(), f"text before the first entry: {line!r}"
        lines.append(line)
    close()
    return entries


def entry(message_id: str) -> Entry:
    [found] = [e for e in parse() if e.id == message_id]
    return found


def unfilled(message_id: str, sent: Sequence[str]) -> set[str]:
    """The @FIELD@ words of ``message_id``'s entry that the fields ``sent`` leave unfilled."""
    return entry(message_id).fields() - set(sent)


@contextlib.contextmanager
def standing_in(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket in ``folder`` standing where journald's is (non-blocking)."""
    path = folder / "journal.socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        sock.settimeout(0)
        monkeypatch.setattr(journald, "SOCKET", str(path))
        yield sock


def entries(sock: socket.socket) -> list[dict[str, str]]:
    """What came so far, journald's native protocol back into fields (values without
    newlines, as the guard's are)."""
    out = []
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return out
        out.append(dict(line.split("=", 1) for line in data.decode().splitlines()))


__all__ = ("CATALOG", "Entry", "entries", "entry", "parse", "standing_in", "unfilled")
