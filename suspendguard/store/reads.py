"""The history read back: rows made into the records of suspendguard/record.py again.

The reading half of :class:`~suspendguard.store.history.History`, and the
one place that turns its columns into records. A damaged row is skipped
with a note, never a traceback, but for a stop's: it names a job that may
still be down, so it is kept, its unreadable time read as unknown (with the
note); a file from an older version (a column or a table it lacks) reads
back what it has.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, cast

from suspendguard.errors import HistoryError
from suspendguard.model import Action, Holder, Outcome, OutcomeKind, Owner, OwnerKind
from suspendguard.record import (
    Attempt,
    AttemptState,
    DeviceHealth,
    Event,
    FindingRecord,
    HealthState,
    KeptHolder,
    KeptRecord,
    Stop,
)
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason, Verdict, VerdictKind

# SQLite's LIMIT is a signed 64-bit integer; more rows than this nobody asks for.
_MAX_ROWS = (1 << 63) - 1
ATTEMPT_COLUMNS = ("id, started, finished, action, origin, dry_run, verdict, reasons, warnings,"
                   " config_digest, guard_pid, guard_start")
# The reasons of an attempt the guard did not finish, recorded by the next open.
INTERRUPTED = Reason("interrupted", "the guard was killed before it gave a verdict")


def texts(column: Any) -> tuple[str, ...]:
    """A JSON list of strings column (reasons, warnings); ValueError when it is not one."""
    value = json.loads(column)
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def _paths(column: Any) -> tuple[str, ...]:
    """A JSON list of absolute paths column (a holder's log_dirs); () for NULL (a row from
    before the column) or a damaged cell: the folders are extra places to read, and their
    loss is no reason to lose the row."""
    try:
        value = json.loads(column) if column is not None else []
    except (ValueError, TypeError):
        return ()
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and v.startswith("/"))


LAST_TIME = 32503680000  # 3000-01-01 UTC: shown as a local date in any time zone
# The rows whose time is a number: SQLite keeps text in a REAL column (a damaged row) and
# sorts it above every number, so MAX(time) would pick that row for ever.
A_TIME = f"typeof(time) IN ('integer', 'real') AND time BETWEEN 0 AND {LAST_TIME}"


def _seconds(value: Any, column: str) -> float | None:
    """A time or a duration column's value; SQLite keeps whatever was written (text in a
    REAL column), so a value that is no number is a damaged row (TypeError)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"{column} is {str(value)[:40]!r}, not a number")
    if value is not None and not 0 <= value <= LAST_TIME:  # NaN too: no time to show
        raise ValueError(f"{column} is {value!r}, out of any time's range")
    return value


def _duration(value: Any) -> bool:
    """Whether ``value`` is a number of seconds a drain could have taken."""
    try:
        return _seconds(value, "seconds") is not None
    except (TypeError, ValueError):
        return False


def _time(value: Any, column: str) -> float:
    """A time column that may not be NULL (see :func:`_seconds`)."""
    if value is None:
        raise TypeError(f"{column} is missing")
    return cast(float, _seconds(value, column))


def _holder(r: Sequence[Any]) -> KeptRecord:
    """A holder's record from its row: pid, start_time, user, unit, comm, cmdline, action, rule,
    outcome, seconds, why, source, round, owner (its key), uid, exe, log_dirs, signalled."""
    holder = KeptHolder(r[0], r[1], r[2] or "", r[3], r[4] or "", r[5] or "", r[11] or "proc",
                        r[14], r[15], _paths(r[16]))
    return KeptRecord(holder, cast(Action, r[6]), r[7] or "",
                      Outcome(cast(OutcomeKind, r[8]), _seconds(r[9], "holder seconds"),
                              r[10] or "", bool(r[17])), r[12],
                      Owner.from_key(r[13]))

def _verdict(kind: str | None, reasons: Any, warnings: Any, details: Any,
             state: AttemptState) -> Verdict:
    """The verdict of a row: its reasons typed from ``reason_details``, or, in a row written
    before reasons had codes, each text with the code ``unrecorded``."""
    words = texts(reasons) if reasons is not None else ()
    typed: tuple[Reason, ...] = ()
    if details is not None:
        value = json.loads(details)
        if not isinstance(value, list):
            raise ValueError(f"expected a JSON list, got {type(value).__name__}")
        typed = tuple(Reason.from_json(v) for v in value)
    if len(typed) != len(words):
        typed = tuple(Reason("interrupted" if state == "interrupted" else "unrecorded", w)
                      for w in words)
    if state == "running" and not typed:
        typed = (Reason("unrecorded", "the guard is still deciding"),)
    verdict = cast(VerdictKind, kind) if kind in ("allow", "veto", "unknown") else "unknown"
    return Verdict(verdict, typed, texts(warnings) if warnings is not None else ())


class Reads:
    """What the history reads: attempts, stops, health checks, a job's earlier drain times."""

    conn: sqlite3.Connection
    path: str
    proc: ProcFS
    notes: list[str]

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A damaged file found while reading is a HistoryError, never a traceback."""
        try:
            yield
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read {self.path}: {exc}") from None

    def _alive(self, pid: int, start: int) -> bool:
        """Whether the guard that began an attempt still runs (same pid, same start)."""
        try:
            st = self.proc.stat(pid)
        except Exception:  # refused or unparsable: no guard we could wait for
            return False
        return st is not None and st.start_time == start
    def drain_times(self, holder: Holder, n: int = 5) -> tuple[float, ...]:
        """How long the same job took to exit after its signal in earlier real drains, newest first.

        The same job: the same unit (a service, not a login's scope), else the
        same uid and executable. Empty when the history has none, or cannot say.
        """
        if not self._columns("holders") >= {"uid", "exe"}:
            return ()
        args: list[object]
        if holder.unit and not holder.unit.endswith(".scope"):
            where, args = "h.unit = ?", [holder.unit]
        elif holder.uid >= 0 and holder.exe:
            where, args = "h.uid = ? AND h.exe = ?", [holder.uid, holder.exe]
        else:
            return ()
        try:
            with self._reading():
                rows = self.conn.execute(
                    "SELECT h.seconds FROM holders h JOIN attempts a ON a.id = h.attempt_id"
                    f" WHERE {where} AND h.outcome = 'exited' AND h.seconds IS NOT NULL"
                    " AND a.dry_run = 0 ORDER BY h.rowid DESC LIMIT ?", (*args, n),
                ).fetchall()
        except (sqlite3.Error, HistoryError):
            return ()
        # A damaged cell (text in the REAL column, NaN) is no earlier time: left out.
        return tuple(float(r[0]) for r in rows if _duration(r[0]))

    def _rows_if_kept(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """The rows of ``sql``; none from a file older than its table, opened read-only (a
        writable open adds the table)."""
        with self._reading():
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    raise
                return []

    def last_health(self) -> list[DeviceHealth]:
        """The answers of the last health check (none before the first): the check written
        last, not the one stamped latest (a wall clock stepped back between two checks)."""
        rows = self._rows_if_kept(
            "SELECT device, family, state, reason, time, attempt_id FROM health WHERE time ="
            f" (SELECT time FROM health WHERE {A_TIME} ORDER BY id DESC LIMIT 1) ORDER BY id")
        return [DeviceHealth(r[0], r[1], cast(HealthState, r[2]), r[3], time=r[4], attempt_id=r[5])
                for r in rows]

    def health_before(self, attempt_id: int) -> dict[str, str]:
        """The devices' own health words the guard read before the attempt's suspend, by
        device (none from a history older than them)."""
        rows = self._rows_if_kept("SELECT device, word FROM health_before WHERE attempt_id = ?",
                                  (attempt_id,))
        return {str(device): str(word) for device, word in rows}

    def pending_stops(self, attempt_id: int | None = None) -> list[Stop]:
        """Jobs stopped by the guard and not yet brought back (held ones too), oldest attempt
        first, in stop order.

        Rows written ahead of a stop that was never answered count: the job
        may well be down.
        """
        where = "(result IS NULL OR result = 'held')" + (
            " AND attempt_id = ?" if attempt_id is not None else "")
        args = (attempt_id,) if attempt_id is not None else ()
        return self._stops(where, args)

    def not_restored(self) -> list[Stop]:
        """The newest stop of each owner that did not end with the job back: pending, failed,
        still starting when restore's budget ended, or left down (a stop of an earlier boot).

        An owner stopped again by a later attempt counts once, by that stop.
        """
        return self._stops("id IN (SELECT MAX(id) FROM stops GROUP BY owner)"
                           " AND (result IS NULL OR result IN ('failed', 'starting', 'left',"
                           " 'held'))", ())

    def _stops(self, where: str, args: Sequence[Any]) -> list[Stop]:
        # A locked or unreadable file is a HistoryError: "no stops" would leave jobs down.
        with self._reading():
            have = self._columns("stops")
            if not have:
                return []  # a file from before stops were recorded, opened read-only
            columns = "boot_id, issued" if have >= {"boot_id", "issued"} else "'', stopped"
            rows = self.conn.execute(
                "SELECT attempt_id, seq, owner, kind, name, uid, stopped,"
                f" restored, result, why, id, {columns} FROM stops WHERE {where}"
                " ORDER BY attempt_id, seq", tuple(args)).fetchall()
        # The owner from its kind, name and uid (its key, the owner column, follows from them).
        return [Stop(Owner(cast(OwnerKind, r[3]), r[4], uid=r[5]), seq=r[1],
                     stopped=self._stop_time(r, 6, "stopped"), attempt_id=r[0],
                     restored=self._stop_time(r, 7, "restored"), result=r[8], why=r[9],
                     id=r[10], boot_id=r[11], issued=self._stop_time(r, 12, "issued", 0.0))
                for r in rows]

    def _stop_time(self, r: Sequence[Any], i: int, column: str,
                   damaged: float | None = None) -> float | None:
        """A stop row's time column; text there (see :func:`_seconds`) reads as ``damaged``,
        with a note: the row itself is kept, since it names a job that may still be down."""
        try:
            return _seconds(r[i], column)
        except (TypeError, ValueError) as exc:
            note = (f"stop {r[10]} ({r[2]}) of attempt {r[0]}: {exc}: read as unknown")
            if note not in self.notes:
                self.notes.append(note)
            return damaged

    def attempts(self, n: int = 20, include_dry_run: bool = True) -> list[Attempt]:
        where = "" if include_dry_run else "WHERE dry_run = 0"
        with self._reading():
            rows = self.conn.execute(
                f"SELECT {self._attempt_columns()} FROM attempts {where} ORDER BY id DESC LIMIT ?",
                (min(n, _MAX_ROWS),),
            ).fetchall()
            attempts = [self._attempt(r) for r in rows]
        return [a for a in attempts if a is not None]

    def attempt(self, attempt_id: int) -> Attempt | None:
        with self._reading():
            rows = self.conn.execute(
                f"SELECT {self._attempt_columns()} FROM attempts WHERE id = ?", (attempt_id,),
            ).fetchall()
            return self._attempt(rows[0]) if rows else None

    def _attempt(self, r: Sequence[Any]) -> Attempt | None:
        """The attempt of one row; None, with a note, for a row too damaged to show."""
        try:
            return self._decode(r)
        except (ValueError, TypeError, OverflowError, OSError) as exc:
            self.notes.append(f"attempt {r[0]}: damaged row skipped ({exc})")
            return None

    def _decode(self, r: Sequence[Any]) -> Attempt:
        started = _time(r[1], "started")
        finished = _seconds(r[2], "finished")
        state: AttemptState = "done"
        if r[6] is None:
            state = "running" if self._alive(r[10], r[11]) else "interrupted"
        elif r[6] == "interrupted":
            state = "interrupted"
        have = self._columns("holders")
        owner = "owner" if "owner" in have else "'plain'"
        who = "uid, exe" if have >= {"uid", "exe"} else "NULL, NULL"
        dirs = "log_dirs" if "log_dirs" in have else "NULL"
        signalled = "signalled" if "signalled" in have else "0"
        holders = tuple(
            _holder(h) for h in self.conn.execute(
                "SELECT pid, start_time, user, unit, comm, cmdline, action, rule, outcome, seconds,"
                f" why, source, round, {owner}, {who}, {dirs}, {signalled} FROM holders"
                " WHERE attempt_id = ?"
                " ORDER BY rowid",
                (r[0],),
            )
        )
        findings = tuple(
            FindingRecord(*f) for f in self.conn.execute(
                "SELECT rule, severity, file, line, time, pid, text FROM findings"
                " WHERE attempt_id = ? ORDER BY rowid", (r[0],),
            )
        )
        events = tuple(
            Event(_time(e[0], "event time"), e[1], e[2], e[3] or "", r[0])
            for e in self.conn.execute(
                "SELECT time, phase, action, note FROM events WHERE attempt_id = ? ORDER BY id",
                (r[0],),
            )
        )
        return Attempt(
            id=r[0], started=started, finished=finished, action=r[3], origin=r[4], dry_run=bool(r[5]),
            verdict=_verdict(r[6], r[7], r[8], r[12], state),
            config_digest=r[9], holders=holders, findings=findings, events=events,
            stops=tuple(self._stops("attempt_id = ?", (r[0],))), state=state,
        )

    def _attempt_columns(self) -> str:
        """The attempt row's columns; a file from before reason_details reads NULL for them."""
        have = self._columns("attempts")
        return ATTEMPT_COLUMNS + (", reason_details" if "reason_details" in have else ", NULL")

    def _columns(self, table: str) -> set[str]:
        """A table's columns, read once: a file from an older version lacks some."""
        known: dict[str, set[str]] = self.__dict__.setdefault("_known_columns", {})
        if table not in known:
            known[table] = {str(c[1]) for c in self.conn.execute(f"PRAGMA table_info({table})")}
        return known[table]

    def events(self, n: int = 20, phase: str | None = None,
               action: str | None = None) -> list[Event]:
        """The newest events of every attempt (of ``phase``, of ``action``: those given),
        newest first; one whose time is damaged (no number) is left out."""
        asked = {"phase": phase, "action": action}
        where = "".join(f" AND {column} = ?" for column, v in asked.items() if v is not None)
        with self._reading():
            rows = self.conn.execute(
                f"SELECT time, attempt_id, phase, action, note FROM events WHERE {A_TIME}{where}"
                " ORDER BY id DESC LIMIT ?",
                (*(v for v in asked.values() if v is not None), min(n, _MAX_ROWS))).fetchall()
        return [Event(e[0], e[2], e[3], e[4] or "", e[1]) for e in rows]

    def last_event(self, phase: str, action: str | None = None) -> Event | None:
        """The newest event of ``phase`` (of ``action`` when given), of any attempt or none."""
        return next(iter(self.events(1, phase, action)), None)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._reading():
            for r in self.conn.execute(
                "SELECT id, verdict, guard_pid, guard_start FROM attempts WHERE dry_run = 0"
            ):
                verdict = r[1] or ("running" if self._alive(r[2], r[3]) else "interrupted")
                out[str(verdict)] = out.get(str(verdict), 0) + 1
        return out

    def finding_counts(self) -> dict[str, int]:
        with self._reading():
            return {str(r[0]): r[1] for r in self.conn.execute(
                "SELECT rule, count(*) FROM findings GROUP BY rule")}

    def last_real_attempt(self, action: str | None = None, since: float | None = None,
                          ended_since: float | None = None) -> Attempt | None:
        """The newest attempt that was no dry run; ``since``: started then or later;
        ``ended_since``: finished then or later (or still unfinished and started then)."""
        return self._last("dry_run = 0", [], action, since, ended_since)

    def last_slept_on(self, action: str | None = None, since: float | None = None,
                      ended_since: float | None = None) -> Attempt | None:
        """The newest attempt a sleep may have followed: a real one, or the veto unit's look
        in observe mode, which refuses nothing (a dry run from a shell is no sleep's)."""
        return self._last("(dry_run = 0 OR origin = ?)", ["unit"], action, since, ended_since)

    def last_observed(self, action: str, since: float) -> Attempt | None:
        """The newest look of the veto unit in observe mode (a dry run it recorded) at an
        ``action`` started ``since`` or later."""
        return self._last("dry_run = 1 AND origin = ?", ["unit"], action, since, None)

    def _last(self, where: str, params: list[Any], action: str | None, since: float | None,
              ended_since: float | None) -> Attempt | None:
        sql = f"SELECT id FROM attempts WHERE {where}"
        if action is not None:
            sql += " AND action = ?"
            params.append(action)
        if since is not None:
            sql += " AND started >= ?"
            params.append(since)
        if ended_since is not None:
            sql += " AND COALESCE(finished, started) >= ?"
            params.append(ended_since)
        with self._reading():
            ids = [r[0] for r in self.conn.execute(sql + " ORDER BY id DESC LIMIT 100", params)]
        # A damaged row (noted) hides none before it.
        return next((a for a in map(self.attempt, ids) if a is not None), None)


