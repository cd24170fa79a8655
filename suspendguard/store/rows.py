"""The rows the history keeps, as data: an attempt, its holders, the jobs it stopped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol


def iso(ts: float) -> str:
    """A time stamp as ISO 8601 with the local zone, to the second."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def texts(column: Any) -> tuple[str, ...]:
    """A JSON list of strings column (reasons, warnings); ValueError when it is not one."""
    value = json.loads(column)
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return tuple(str(v) for v in value)


@dataclass(frozen=True, slots=True)
class HolderRow:
    """One holder of one attempt: who it was, what the guard did, how it ended."""

    pid: int
    start_time: int
    user: str
    unit: str | None
    comm: str
    cmdline: str
    action: str
    rule: str
    outcome: str
    seconds: float | None
    why: str
    source: str = "proc"
    round: int = 1
    owner: str = "plain"  # the owner's key (guard/owner.py)

    def to_json(self) -> dict[str, Any]:
        """The holder keys every command's JSON shares (check --json adds detail):
        ``command`` one printable line, ``outcome`` an object."""
        return {
            "pid": self.pid, "start_time": self.start_time, "user": self.user,
            "unit": self.unit, "comm": self.comm, "command": self.cmdline,
            "action": self.action, "rule": self.rule,
            "outcome": {"kind": self.outcome, "seconds": self.seconds, "why": self.why},
            "source": self.source, "round": self.round, "owner_key": self.owner,
        }


@dataclass(frozen=True, slots=True)
class StopRow:
    """A job the guard stopped through its owner, and what became of it at restore."""

    attempt_id: int
    seq: int  # the order it was stopped in, within its attempt
    owner: str  # the owner's key
    kind: str
    name: str
    uid: int | None
    stopped: float
    restored: float | None = None
    # started | starting | failed | skipped | left (a stop of an earlier boot,
    # not started again); None: not yet brought back; held: kept stopped after
    # resume because its device is unhealthy (why says so)
    result: str | None = None
    why: str = ""
    id: int = 0
    boot_id: str = ""  # the boot the stop was made in; "" in files from before it was kept
    # When the supervisor took the stop; None while it was being issued (the
    # row is written first: a guard killed then leaves it for restore).
    issued: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"owner": self.owner, "kind": self.kind, "name": self.name, "uid": self.uid,
                "order": self.seq, "stopped": iso(self.stopped),
                "issued": self.issued is not None, "boot_id": self.boot_id or None,
                "restored": iso(self.restored) if self.restored is not None else None,
                "result": self.result or "pending", "why": self.why}


@dataclass(frozen=True, slots=True)
class HealthRow:
    """One device's answer to the health check after resume."""

    device: str
    family: str
    state: str  # healthy | unhealthy | unknown
    reason: str = ""
    time: float = 0.0
    attempt_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "family": self.family, "state": self.state,
                "reason": self.reason, "time": iso(self.time) if self.time else None,
                "attempt": self.attempt_id}


@dataclass(frozen=True, slots=True)
class Attempt:
    """One suspend attempt as stored: the verdict, its reasons, holders, findings, events."""

    id: int
    started: float
    finished: float | None
    action: str | None
    origin: str
    dry_run: bool
    verdict: str  # allow | veto | interrupted | running
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]
    config_digest: str
    holders: tuple[HolderRow, ...] = ()
    findings: tuple[dict[str, Any], ...] = ()
    events: tuple[dict[str, Any], ...] = ()
    stops: tuple[StopRow, ...] = ()

    @property
    def duration(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": iso(self.started),
            "finished": iso(self.finished) if self.finished is not None else None,
            "duration_s": None if self.duration is None else round(self.duration, 3),
            "action": self.action,
            "origin": self.origin,
            "dry_run": self.dry_run,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "warnings": list(self.warnings),
            "config_digest": self.config_digest,
            "holders": [h.to_json() for h in self.holders],
            "findings": list(self.findings),
            "events": list(self.events),
            "stopped": [s.to_json() for s in self.stops],
        }


class LogFinding(Protocol):
    """What the history stores of a log finding (the logs package's Finding has it)."""

    @property
    def rule(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def file(self) -> str: ...
    @property
    def line(self) -> int: ...
    @property
    def time(self) -> datetime | None: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def text(self) -> str: ...
