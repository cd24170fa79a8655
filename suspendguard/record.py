"""The records of suspend attempts: one type per thing, from the guard to the history to the status.

- :class:`HolderRecord`: one holder of one attempt: the guard's decision on
  it, what came of it, who runs it; :class:`KeptRecord`, what the history
  keeps of it;
- :class:`Stop`: a job the guard stopped through its owner, and what became
  of it at restore;
- :class:`DeviceHealth`: one device's answer to the health check after resume;
- :class:`Attempt`: one suspend attempt: its verdict with reasons and
  warnings, its holders, stops, findings and events.

The guard makes them (guard/run_state.py, guard/pipeline.py; its report
holds the attempt, guard/report.py), the history writes them and reads back the
same types (store/history.py, the only code that knows their columns), and
``status`` and ``history`` render them. Each has one ``to_json``: the JSON
of every command that shows it. Read back from the history, a record has
only what the history keeps; each type says what that is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from suspendguard.model import PLAIN, Action, Decision, Holder, Outcome, Owner
from suspendguard.verdict import Verdict

# What an attempt came to: a verdict (model.VerdictKind), or, for one the
# guard did not finish, interrupted (it was killed, or failed) or running (it still runs).
AttemptVerdict = Literal["allow", "veto", "unknown", "interrupted", "running"]


def iso(ts: float) -> str:
    """A time stamp as ISO 8601 with the local zone, to the second."""
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class HolderRecord:
    """One holder of one attempt, as the guard found it: its decision, its outcome, its owner.

    Made once by the guard, from the decision and the outcome
    (guard/run_state.py). What the history keeps of it, and reads back, is
    a :class:`KeptRecord`.
    """

    decision: Decision
    outcome: Outcome
    round: int = 1
    respawned: str = ""  # the tag of a holder found again after its drain, "" for most
    owner: Owner = PLAIN

    @property
    def holder(self) -> Holder:
        return self.decision.holder

    @property
    def action(self) -> Action:
        return self.decision.action

    @property
    def rule(self) -> str:
        return self.decision.rule

    @property
    def why(self) -> str:
        """What the history keeps as the outcome's why: the outcome's own, else the respawn tag."""
        return self.outcome.why or self.respawned

    def kept(self) -> KeptRecord:
        """What the history keeps of this record."""
        h = self.holder
        return KeptRecord(
            KeptHolder(h.pid, h.start_time, h.user, h.unit, h.comm, h.command, h.source,
                       h.uid if h.uid >= 0 else None, h.exe or None, h.log_dirs),
            self.action, self.rule, replace(self.outcome, why=self.why), self.round, self.owner)

    def to_json(self) -> dict[str, Any]:
        """The one holder schema of check and status (docs/json-and-metrics.md): what the
        history keeps (:meth:`KeptRecord.to_json`), and what only a live scan knows."""
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


@dataclass(frozen=True, slots=True)
class KeptHolder:
    """What the history keeps of a holder: who it was, and its own log folders (read after
    resume). ``uid`` and ``exe`` are None, ``log_dirs`` empty, where the history does not
    have them (a file from before they were kept)."""

    pid: int
    start_time: int  # field 22 of /proc/PID/stat
    user: str
    unit: str | None
    comm: str
    command: str  # the command line as one printable line
    source: str = "proc"
    uid: int | None = None
    exe: str | None = None
    log_dirs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KeptRecord:
    """One holder of one attempt as the history keeps it and reads it back: the holder, the
    decision's action and rule, the outcome (its ``why`` holds the respawn tag where the
    outcome had none), the round, and of the owner its kind, name and uid."""

    holder: KeptHolder
    action: Action
    rule: str
    outcome: Outcome
    round: int = 1
    owner: Owner = PLAIN

    @classmethod
    def of(cls, *, pid: int, start_time: int, user: str, unit: str | None, comm: str,
           command: str, action: Action, rule: str, outcome: Outcome, source: str = "proc",
           round: int = 1, owner: Owner = PLAIN) -> KeptRecord:
        return cls(KeptHolder(pid, start_time, user, unit, comm, command, source), action, rule,
                   outcome, round, owner)

    def to_json(self) -> dict[str, Any]:
        """A holder in ``history --json``: the keys of :meth:`HolderRecord.to_json` that the
        history keeps, in the same order."""
        h = self.holder
        return {"pid": h.pid, "start_time": h.start_time, "comm": h.comm, "command": h.command,
                "user": h.user, "unit": h.unit, "owner_key": self.owner.key, "source": h.source,
                "action": self.action, "rule": self.rule, "outcome": self.outcome.to_json(),
                "round": self.round}


@dataclass(frozen=True, slots=True)
class Stop:
    """A job the guard stopped through its owner: in which order and when, and what became of it.

    Made by the guard as it asks the supervisor (``owner``, ``seq``,
    ``stopped``), completed by the history. The history keeps every field
    but the owner's: of it, its kind, name and uid.
    """

    owner: Owner
    seq: int  # the order it was stopped in, within its attempt
    stopped: float | None  # when (wall clock); None: the history's row holds no readable time
    attempt_id: int = 0
    restored: float | None = None
    # started | starting | failed | skipped | left (a stop of an earlier boot,
    # not started again); None: not yet brought back; held: kept stopped after
    # resume because its device is unhealthy (why says so)
    result: str | None = None
    why: str = ""
    id: int = 0  # the history's row; 0 before it is written
    boot_id: str = ""  # the boot the stop was made in; "" in files from before it was kept
    # When the supervisor took the stop; None while it was being issued (the
    # row is written first: a guard killed then leaves it for restore).
    issued: float | None = None

    def to_json(self) -> dict[str, Any]:
        o = self.owner
        return {"owner": o.key, "kind": o.kind, "name": o.name, "uid": o.uid,
                "order": self.seq, "stopped": iso(self.stopped) if self.stopped is not None else None,
                "issued": self.issued is not None, "boot_id": self.boot_id or None,
                "restored": iso(self.restored) if self.restored is not None else None,
                "result": self.result or "pending", "why": self.why}


HealthState = Literal["healthy", "unhealthy", "unknown"]


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """One device (or a family's devices together, ``nvidia``) as one health check after resume found it.

    Made by the check (health/), stamped by the history with the check's
    time and attempt. The history keeps every field but ``source`` and
    ``signature``, which read back as "".
    """

    device: str  # "gpu 0", "npu 0 chip 1", "nvidia" when the driver cannot count them
    family: str
    state: HealthState
    reason: str = ""  # why unhealthy or unknown; "" when healthy
    source: str = ""  # the check that said so: cuda, nvml, kernel-log, npu-smi, acl, catalog
    signature: str = ""  # a known failure a repair exists for (health/model.py's UVM_SIGNATURE)
    time: float = 0.0  # when the history took it; 0 before
    attempt_id: int | None = None  # the attempt it came after, as the history has it

    def describe(self) -> str:
        return f"{self.device} {self.state}" + (f": {self.reason}" if self.reason else "")

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "family": self.family, "state": self.state,
                "reason": self.reason, "source": self.source, "signature": self.signature,
                "time": iso(self.time) if self.time else None, "attempt": self.attempt_id}


@dataclass(frozen=True, slots=True)
class FindingRecord:
    """A log finding as the history keeps it: the catalog's rule, where it was, what it said.

    Made from the logs' own finding (logs/finding.py) at the edge of the
    history; ``time`` is the entry's own ISO 8601 stamp, None when it had none.
    """

    rule: str
    severity: str
    file: str
    line: int
    time: str | None
    pid: int | None
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "severity": self.severity, "file": self.file,
                "line": self.line, "time": self.time, "pid": self.pid, "text": self.text}


@dataclass(frozen=True, slots=True)
class Event:
    """One step after an attempt (resumed, restored, health checked), as the history keeps it."""

    time: float
    phase: str
    action: str | None
    note: str = ""
    attempt_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """One of an attempt's ``events``: what the history read back, in its JSON."""
        return {"time": iso(self.time), "phase": self.phase, "action": self.action,
                "note": self.note}


# How an attempt the guard did not finish stands: interrupted (killed, or failed), running.
AttemptState = Literal["done", "interrupted", "running"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One suspend attempt: its verdict with reasons and warnings, holders, stops, findings, events.

    Made by the guard at the verdict (without findings and events, which
    come after resume; ``id`` 0 when the history did not take it), read
    back whole from the history. An attempt the guard did not finish has
    ``state`` interrupted or running, ``finished`` None, and a verdict of
    unknown that says why.
    """

    id: int
    started: float
    finished: float | None
    action: str | None
    origin: str
    dry_run: bool
    verdict: Verdict
    config_digest: str
    # As the guard found them; read back from the history, as it keeps them.
    holders: tuple[HolderRecord | KeptRecord, ...] = ()
    findings: tuple[FindingRecord, ...] = ()
    events: tuple[Event, ...] = ()
    stops: tuple[Stop, ...] = ()
    state: AttemptState = "done"

    @property
    def result(self) -> AttemptVerdict:
        """The verdict, or what became of an attempt the guard did not finish."""
        return self.verdict.kind if self.state == "done" else self.state

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.verdict.texts

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.verdict.warnings

    @property
    def duration(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    @property
    def what(self) -> str:
        """What was attempted, in the operator's words: the sleep action guarded (only looked
        at, in observe mode: a dry run recorded with an action); from a shell, ``drain`` (or a
        dry run)."""
        if self.action and self.dry_run:
            return f"{self.action} (observed)"
        return self.action or ("dry run" if self.dry_run else "drain")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": iso(self.started),
            "finished": iso(self.finished) if self.finished is not None else None,
            "duration_s": None if self.duration is None else round(self.duration, 3),
            "action": self.action,
            "origin": self.origin,
            "dry_run": self.dry_run,
            "verdict": self.result,
            "reasons": list(self.reasons),
            "reason_details": [r.to_json() for r in self.verdict.reasons],
            "warnings": list(self.warnings),
            "config_digest": self.config_digest,
            "holders": [h.to_json() for h in self.holders],
            "findings": [f.to_json() for f in self.findings],
            "events": [e.to_json() for e in self.events],
            "stopped": [s.to_json() for s in self.stops],
        }
