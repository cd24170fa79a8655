"""What one step of a guard run found: the veto reasons and the warnings, as a value.

Each step returns its own; the pipeline adds them up in the order found. No
step appends to a list another module holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from suspendguard.verdict import Reason


@dataclass(frozen=True, slots=True)
class Said:
    """The veto reasons and warnings one step of a run found, in the order found."""

    reasons: tuple[Reason, ...] = ()
    warnings: tuple[str, ...] = ()

    def __add__(self, other: Said) -> Said:
        return Said((*self.reasons, *other.reasons), (*self.warnings, *other.warnings))

    @classmethod
    def warn(cls, *warnings: str) -> Said:
        return cls((), tuple(w for w in warnings if w))

    @classmethod
    def veto(cls, *reasons: Reason) -> Said:
        return cls(tuple(reasons))


NOTHING = Said()
