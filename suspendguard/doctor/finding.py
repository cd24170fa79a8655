"""A finding of the preflight: what is wrong, how bad, and its fix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True, slots=True)
class Finding:
    id: str
    severity: Severity  # error: a suspend will fail or go unguarded; note: to know, nothing to fix
    text: str
    fix: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": self.severity, "text": self.text, "fix": self.fix}


def to_fix(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity != "note"]
