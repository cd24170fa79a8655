"""One documented failure found in a device log: the unit the history stores."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True, slots=True)
class Finding:
    """A log record that matched a rule of the catalog.

    ``line`` counts from the first byte read: when only the end of a big file
    was read (``[logs] max_bytes``) the scan report says where that was.
    ``time`` is the record's own timestamp (naive local time, as the device
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
