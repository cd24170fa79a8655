"""The guard's report as data: the attempt it made, and what only the run knows.

One format for the dry run, the veto unit and the hook: ``to_json`` is the
``check --json`` output. The report holds the attempt record
(suspendguard/record.py: the verdict with its reasons and warnings, each
holder's record, the stops), the one the history writes, and adds the
run's own parts, which the history does not keep: the nodes found, the
idle check's answer, the processes the scan could not read, whether the
history took the attempt, and whether this run can veto at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from suspendguard.idle.base import IdleReport
from suspendguard.model import HolderId, Inventory, Unavailable
from suspendguard.record import Attempt, HolderRecord
from suspendguard.verdict import Verdict

# The keys check --json shares with the attempt's record (record.Attempt.to_json).
SHARED_KEYS = ("verdict", "dry_run", "action", "origin", "reasons", "reason_details", "warnings",
               "holders", "started")

# The history's answer when the attempt was stored; else Unavailable, with why.
RECORDED: Literal["recorded"] = "recorded"


@dataclass(frozen=True, slots=True)
class IdleSkipped:
    """The idle step did not run, and why.

    ``none``: there was nothing to ask (no accelerator node, no backend for
    the nodes found); ``skipped``: it was not needed (the verdict was already
    veto) or the guard was stopped first.
    """

    state: Literal["none", "skipped"]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "devices": [], "backends": [], "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Report:
    attempt: Attempt  # its id 0 when the history did not take it (``history`` says why)
    inventory: Inventory
    unreadable: int
    idle: IdleReport | IdleSkipped
    history: Literal["recorded"] | Unavailable = RECORDED
    unreadable_pids: tuple[int, ...] = ()
    # Holders an earlier attempt sent the drain signal and left running, by that attempt:
    # a drain waits for them and sends none a second one.
    signalled_before: Mapping[HolderId, int] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        """The attempt's verdict with its reasons and warnings (a run always comes to one)."""
        return self.attempt.verdict

    @property
    def holders(self) -> tuple[HolderRecord, ...]:
        # A run's own attempt: every holder as the guard found it.
        return tuple(h for h in self.attempt.holders if isinstance(h, HolderRecord))

    def unreadable_note(self, as_root: bool) -> str:
        """"N processes could not be inspected (not root)", or "" when all could."""
        n = self.unreadable
        if not n:
            return ""
        pids = ", ".join(str(p) for p in self.unreadable_pids[:8])
        more = ", ..." if len(self.unreadable_pids) > 8 else ""
        why = "permission denied" if as_root else "not root"
        return (f"{n} process{'es' if n != 1 else ''} could not be inspected ({why})"
                + (f": pid {pids}{more}" if pids else ""))

    def to_json(self) -> dict[str, Any]:
        """``check --json``: the attempt's own keys, and the run's parts the history does not keep."""
        a = self.attempt.to_json()
        return {
            **{key: a[key] for key in SHARED_KEYS},
            "devices": [n.to_json() for n in self.inventory.nodes],
            "unreadable": self.unreadable,
            "idle": self.idle.to_json(),
            "attempt_id": self.attempt.id or None,
            "history": self.history if isinstance(self.history, str)
            else f"not recorded: {self.history.reason}",
            "duration_s": round(self.attempt.duration or 0.0, 3),
        }
