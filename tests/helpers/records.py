"""Records as the guard makes them, for tests that write a history by hand."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from suspendguard.model import Owner
from suspendguard.record import Attempt, FindingRecord, HolderRecord, Stop
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME, MARKER_NAME
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


def drained_unit(tmp_path: Path, unit: str, origin: str = "unit") -> int:
    """An attempt (its id) that stopped ``unit`` through its drain drop-in, still in place and
    the unit not started since: the history in ``tmp_path/state``, the drop-in under
    ``tmp_path/run``."""
    now = time.time()
    with History.open(str(tmp_path / "state")) as h:
        attempt = h.begin("suspend", origin, False, "digest", now - 5)
        h.finish(ended(attempt, "allow", finished=now - 4,
                       stops=[Stop(Owner("systemd-service", unit), 0, now - 4.5)]))
    dropin = tmp_path / "run" / f"{unit}.d"
    dropin.mkdir(parents=True)
    (dropin / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    (dropin / MARKER_NAME).write_text("")
    return attempt
