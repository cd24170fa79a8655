"""What a log search reports: a documented failure found, or a path left unread.

A ``Finding`` is also the unit the history stores. Both cross from a forked
reader back to the search as their JSON, so ``from_json`` sits beside
``to_json``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from suspendguard.record import FindingRecord

Side = Literal["before", "after"]


@dataclass(frozen=True, slots=True)
class Outside:
    """A finding stamped outside the attempt it was read for: ``by_s`` seconds before or after.

    Device-side times come from the device's clock, which can lag or lead
    the host's: such a line was still read (``[logs] clock_slack_s``), and
    says so rather than pass for part of the attempt.
    """

    side: Side
    by_s: float

    def describe(self) -> str:
        edge = "began" if self.side == "before" else "ended"
        return f"stamped {self.by_s:.3f} s {self.side} the attempt {edge} (device clock?)"

    def to_json(self) -> dict[str, Any]:
        return {"side": self.side, "by_s": round(self.by_s, 6)}


@dataclass(frozen=True, slots=True)
class Finding:
    """A log entry that matched a rule of the catalog.

    ``line`` counts from the first byte read: when only the end of a big file
    was read (``[logs] max_bytes``) the search report says where that was.
    ``time`` is the entry's own timestamp (naive local time, as the device
    writes it); masked lines carry none. A finding from a unit's journal
    names the unit (``unit``; ``file`` is ``journal:UNIT``, ``line`` the
    entry's number among those read) and carries the journal's time.
    ``outside``: set when the time lies outside the attempt it was read for.
    ``code``: the vendor code (logs/codes.py) the entry carries for its rule,
    if any; a line whose wording is new is named by it. ``described``: what
    failed in the entry's own words, where the reference does not say (a
    ``Name(CODE): text`` whose code it lacks, logs/named.py).
    """

    rule: str
    severity: str
    file: str
    line: int
    time: datetime | None
    pid: int | None
    text: str
    unit: str | None = None
    outside: Outside | None = None
    code: str | None = None
    described: str | None = None

    def placed(self, start: datetime, end: datetime | None) -> Finding:
        """This finding, marked when its time is before ``start`` or after ``end``."""
        if self.time is None:
            return self
        if self.time < start:
            side: Side = "before"
            by = (start - self.time).total_seconds()
        elif end is not None and self.time > end:
            side, by = "after", (self.time - end).total_seconds()
        else:
            return replace(self, outside=None)
        return replace(self, outside=Outside(side, by))

    def record(self) -> FindingRecord:
        """What the history keeps of it."""
        return FindingRecord(self.rule, self.severity, self.file, self.line,
                             self.time.isoformat() if self.time else None, self.pid, self.text)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "time": self.time.isoformat() if self.time else None,
            "pid": self.pid,
            "text": self.text,
            "unit": self.unit,
            "outside_attempt": self.outside.to_json() if self.outside else None,
            "code": self.code,
        }
        if self.described is not None:  # only where the reference does not say
            doc["described"] = self.described
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Finding:
        time = datetime.fromisoformat(doc["time"]) if doc["time"] else None
        out = doc.get("outside_attempt")
        outside = Outside(out["side"], float(out["by_s"])) if out else None
        return cls(doc["rule"], doc["severity"], doc["file"], doc["line"], time, doc["pid"],
                   doc["text"], doc.get("unit"), outside, doc.get("code"), doc.get("described"))


# Why a log was not read, or read whole, when the time for reading logs was up.
TIME_RAN_OUT = "the time for reading logs ran out"
# Lines of a documented failure left out by their stamps, in a file written to since.
STAMPED_BEFORE = "stamped before the time asked"
# A link met inside a folder walked, which is not followed (as grep -r does not).
NOT_FOLLOWED = "symbolic link, not followed"


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


@dataclass(frozen=True, slots=True)
class UnknownCode:
    """A code-shaped token, in a line that says it failed, that the vendor code table lacks.

    Never a finding: ``logs --verbose`` shows it as an unrecognised vendor
    code, so that the table can learn it.
    """

    code: str
    file: str
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "file": self.file, "line": self.line, "text": self.text}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> UnknownCode:
        return cls(doc["code"], doc["file"], doc["line"], doc["text"])
