"""The guard's report as data: each holder's decision and outcome, and the verdict.

One format for the dry run, the veto unit and the hook: ``to_json`` is the
``check --json`` output and ``HolderResult.row`` the history's row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

from suspendguard.guard.owner import PLAIN, Owner
from suspendguard.idle.base import IdleReport
from suspendguard.model import Decision, Inventory, Outcome, Unavailable, Verdict
from suspendguard.store.history import HolderRow

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
class HolderResult:
    decision: Decision
    outcome: Outcome
    round: int = 1
    respawned: str = ""
    owner: Owner = PLAIN

    def to_json(self) -> dict[str, Any]:
        h = self.decision.holder
        return {
            "pid": h.pid,
            "start_time": h.start_time,
            "ppid": h.ppid,
            "comm": h.comm,
            "exe": h.exe,
            "cmdline": list(h.cmdline),
            "command": h.command,
            "user": h.user,
            "uid": h.uid,
            "unit": h.unit,
            "container": h.container,
            "owner": self.owner.to_json(),
            "owner_key": self.owner.key,
            "nspid": list(h.nspid),
            "nodes": [
                {"path": n.node.path, "seen_as": n.seen_as, "role": n.node.role, "via": n.via}
                for n in h.nodes
            ],
            "sigint": h.sigint,
            "frozen": h.frozen,
            "source": h.source,
            "action": self.decision.action,
            "rule": self.decision.rule,
            "notes": list(self.decision.notes),
            "outcome": self.outcome.to_json(),
            "round": self.round,
            "respawned": self.respawned or None,
        }

    def row(self) -> HolderRow:
        h = self.decision.holder
        return HolderRow(
            pid=h.pid, start_time=h.start_time, user=h.user, unit=h.unit, comm=h.comm,
            cmdline=h.command, action=self.decision.action, rule=self.decision.rule,
            outcome=self.outcome.kind, seconds=self.outcome.seconds,
            why=self.outcome.why or self.respawned, source=h.source, round=self.round,
            owner=self.owner.key,
        )


@dataclass(frozen=True, slots=True)
class Report:
    verdict: Verdict
    dry_run: bool
    action: str | None
    origin: str
    inventory: Inventory
    holders: tuple[HolderResult, ...]
    unreadable: int
    idle: IdleReport | IdleSkipped
    started: float
    duration_s: float
    attempt_id: int | None = None
    history: Literal["recorded"] | Unavailable = RECORDED
    can_veto: bool = True
    unreadable_pids: tuple[int, ...] = ()

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
        return {
            "verdict": self.verdict.kind,
            "dry_run": self.dry_run,
            "action": self.action,
            "origin": self.origin,
            "reasons": list(self.verdict.reasons),
            "warnings": list(self.verdict.warnings),
            "devices": [n.to_json() for n in self.inventory.nodes],
            "holders": [h.to_json() for h in self.holders],
            "unreadable": self.unreadable,
            "idle": self.idle.to_json(),
            "attempt_id": self.attempt_id,
            "history": self.history if isinstance(self.history, str)
            else f"not recorded: {self.history.reason}",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started)),
            "duration_s": round(self.duration_s, 3),
            "can_veto": self.can_veto,
        }
