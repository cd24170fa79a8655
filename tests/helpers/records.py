"""Records as the guard makes them, for tests that write a history by hand."""

from __future__ import annotations

from collections.abc import Sequence

from suspendguard.record import Attempt, AttemptVerdict, HolderRecord, Stop


def ended(attempt_id: int, verdict: AttemptVerdict = "allow", reasons: Sequence[str] = (),
          holders: Sequence[HolderRecord] = (), finished: float | None = None,
          stops: Sequence[Stop] = ()) -> Attempt:
    """The attempt ``History.begin`` opened, as the guard ends it (what ``finish`` writes)."""
    return Attempt(attempt_id, 0.0, finished, None, "unit", False, verdict, tuple(reasons), (),
                   "", tuple(holders), stops=tuple(stops))
