"""Records as the guard makes them, for tests that write a history by hand."""

from __future__ import annotations

from collections.abc import Sequence

from suspendguard.record import Attempt, FindingRecord, HolderRecord, Stop
from suspendguard.verdict import Reason, ReasonCode, Verdict, VerdictKind


def finding(rule: str) -> FindingRecord:
    """A finding of ``rule`` as the history keeps it."""
    return FindingRecord(rule, "error", "/var/log/npu/slog/device-0.log", 1, None, None, rule)


def ended(attempt_id: int, verdict: VerdictKind = "allow", reasons: Sequence[str] = (),
          holders: Sequence[HolderRecord] = (), finished: float | None = None,
          stops: Sequence[Stop] = (), code: ReasonCode = "timeout-after-sigint") -> Attempt:
    """The attempt ``History.begin`` opened, as the guard ends it (what ``finish`` writes);
    each reason with ``code``."""
    return Attempt(attempt_id, 0.0, finished, None, "unit", False,
                   Verdict(verdict, tuple(Reason(code, r) for r in reasons)), "",
                   tuple(holders), stops=tuple(stops))
