"""What a log search reports: a documented failure found, or a path left unread.

A ``Finding`` is also the unit the history stores. Both cross from a forked
reader back to the search as their JSON, so ``from_json`` sits beside
``to_json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """A log entry that matched a rule of the catalog.

    ``line`` counts from the first byte read: when only the end of a big file
    was read (``[logs] max_bytes``) the search report says where that was.
    ``time`` is the entry's own timestamp (naive local time, as the device
    writes it); masked lines carry none.
    """

    rule: str
    severity: str
    file: str
    line: int
    time: datetime | None
    pid: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "time": self.time.isoformat() if self.time else None,
            "pid": self.pid,
            "text": self.text,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Finding:
        time = datetime.fromisoformat(doc["time"]) if doc["time"] else None
        return cls(doc["rule"], doc["severity"], doc["file"], doc["line"], time, doc["pid"],
                   doc["text"])


@dataclass(frozen=True, slots=True)
class Skipped:
    """A path, or part of a file, that was not read, and why."""

    path: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Skipped:
        return cls(doc["path"], doc["reason"])
