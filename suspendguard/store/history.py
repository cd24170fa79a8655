"""The history of suspend attempts: writing them down and reading them back.

An attempt row is written when the attempt begins and completed in one
transaction at its end, so a guard killed with SIGKILL leaves a row that the
next open marks ``interrupted``: never lost, never half-written. Whether that
guard still runs is read through the caller's :class:`ProcFS`, the same /proc
the guard itself sees. Failing to write history never changes a verdict; the
caller gets the reason as a warning, and no wait for the database's lock
runs past the deadline the caller gives. A damaged file or row makes reading
fail with a HistoryError or skip the row, saying so in ``notes``, never a
traceback. The file itself is :mod:`.database`'s.

What is written and read back are the records of suspendguard/record.py:
this module is the only code that knows their columns. A record read back
has only the fields the history keeps (each record's type says which); the
others are their empty defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol, cast

from suspendguard.config import Config, to_toml
from suspendguard.errors import HistoryError
from suspendguard.model import Action, Holder, Outcome, OutcomeKind, Owner, OwnerKind
from suspendguard.record import (
    Attempt,
    AttemptVerdict,
    DeviceHealth,
    HealthState,
    HolderRecord,
    Stop,
    iso,
)
from suspendguard.store import database, reserve
from suspendguard.system.procfs import ProcFS

DB_NAME = "history.db"

_INTERRUPTED = "the guard was killed before it gave a verdict"
# SQLite's LIMIT is a signed 64-bit integer; more rows than this nobody asks for.
_MAX_ROWS = (1 << 63) - 1
_ATTEMPT_COLUMNS = ("id, started, finished, action, origin, dry_run, verdict, reasons, warnings,"
                    " config_digest, guard_pid, guard_start")


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


def texts(column: Any) -> tuple[str, ...]:
    """A JSON list of strings column (reasons, warnings); ValueError when it is not one."""
    value = json.loads(column)
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return tuple(str(v) for v in value)


def _holder(r: Sequence[Any]) -> HolderRecord:
    """A holder's record from its row: pid, start_time, user, unit, comm, cmdline, action, rule,
    outcome, seconds, why, source, round, owner (its key)."""
    return HolderRecord.kept(
        pid=r[0], start_time=r[1], user=r[2] or "", unit=r[3], comm=r[4] or "",
        command=r[5] or "", action=cast(Action, r[6]), rule=r[7] or "",
        outcome=Outcome(cast(OutcomeKind, r[8]), r[9], r[10] or ""), source=r[11] or "proc",
        round=r[12], owner=Owner.from_key(r[13]))


def _left(deadline: float) -> float:
    """Seconds a lock may still be waited for before ``deadline`` (monotonic)."""
    return max(0.0, min(database.LOCK_WAIT_S, deadline - time.monotonic()))


class History:
    def __init__(self, conn: sqlite3.Connection, path: str, warnings: list[str],
                 proc: ProcFS, deadline: float | None = None) -> None:
        self.conn = conn
        self.path = path
        self.warnings = warnings
        self.proc = proc
        self.deadline = deadline
        # What reading could not show (a damaged row), for the reader to say.
        self.notes: list[str] = []

    # -- opening ------------------------------------------------------------

    @classmethod
    def open(cls, state_dir: str, readonly: bool = False, *,
             proc: ProcFS | None = None, deadline: float | None = None) -> History:
        """Open (or create) the database; raises HistoryError with the reason.

        ``proc``: the /proc that tells whether a recorded guard still runs
        (default: the host's). ``deadline``: a ``time.monotonic()`` time no
        wait for the database's lock may pass (default: each waits at most
        database.LOCK_WAIT_S).
        """
        proc = proc or ProcFS()
        path = os.path.join(state_dir, DB_NAME)
        warnings: list[str] = []
        if readonly:
            return cls(database.open_readonly(path), path, warnings, proc)
        database.prepare_dir(state_dir)
        wait = database.LOCK_WAIT_S if deadline is None else _left(deadline)
        history = cls(database.open_writable(path, warnings, wait), path, warnings, proc,
                      deadline)
        try:
            history._mark_interrupted()
        except (HistoryError, sqlite3.Error) as exc:
            history.close()
            raise HistoryError(f"cannot write {path}: {exc}") from None
        return history

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        try:
            if self.deadline is not None:
                left_ms = int(_left(self.deadline) * 1000)
                self.conn.execute(f"PRAGMA busy_timeout = {left_ms}")
            with self.conn:
                yield self.conn
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot write {self.path}: {exc}") from None

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """A damaged file found while reading is a HistoryError, never a traceback."""
        try:
            yield
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot read {self.path}: {exc}") from None

    def _mark_interrupted(self) -> None:
        rows = self.conn.execute(
            "SELECT id, guard_pid, guard_start FROM attempts WHERE verdict IS NULL"
        ).fetchall()
        dead = [r[0] for r in rows if not self._alive(r[1], r[2])]
        if dead:
            with self._tx() as c:
                c.executemany(
                    "UPDATE attempts SET verdict='interrupted', reasons=? WHERE id=?",
                    [(json.dumps([_INTERRUPTED]), i) for i in dead],
                )

    def _alive(self, pid: int, start: int) -> bool:
        """Whether the guard that began an attempt still runs (same pid, same start)."""
        try:
            st = self.proc.stat(pid)
        except Exception:  # refused or unparsable: no guard we could wait for
            return False
        return st is not None and st.start_time == start

    # -- writing ------------------------------------------------------------

    @staticmethod
    def digest(config: Config) -> str:
        """A short fingerprint of the effective values: the attempt's ``config_digest``."""
        return hashlib.sha256(to_toml(config).encode()).hexdigest()[:16]

    def begin(self, action: str | None, origin: str, dry_run: bool, digest: str,
              started: float | None = None) -> int:
        me = self.proc.stat(os.getpid())
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO attempts (started, action, origin, dry_run, config_digest, guard_pid,"
                " guard_start) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (started or time.time(), action, origin, int(dry_run), digest, os.getpid(),
                 me.start_time if me else 0),
            )
            attempt_id = int(cur.lastrowid or 0)
        # While there is room: keep some for this attempt's verdict (see .reserve).
        reserve.keep(os.path.dirname(self.path))
        return attempt_id

    def signalling(self, attempt_id: int, holders: Sequence[HolderRecord]) -> None:
        """Write down who is about to be signalled, before the signal: a guard killed
        mid-drain leaves these rows; :meth:`finish` replaces them with the outcomes."""
        with self._tx() as c:
            self._insert_holders(c, attempt_id, holders)

    def finish(self, attempt: Attempt) -> None:
        """Write the attempt as the guard ended it: its verdict, reasons, warnings, end,
        holders, and the stops whose rows are not in yet (:meth:`stopping` wrote the others)."""
        try:
            self._finish(attempt)
        except HistoryError as exc:
            # The disk filled during the run: write the verdict in the room kept for it.
            if "full" not in str(exc) or not reserve.release(os.path.dirname(self.path)):
                raise
            self._finish(attempt)

    def _finish(self, attempt: Attempt) -> None:
        with self._tx() as c:
            c.execute("DELETE FROM holders WHERE attempt_id = ?", (attempt.id,))
            c.execute(
                "UPDATE attempts SET finished=?, verdict=?, reasons=?, warnings=? WHERE id=?",
                (attempt.finished or time.time(), attempt.verdict,
                 json.dumps(list(attempt.reasons)), json.dumps(list(attempt.warnings)),
                 attempt.id),
            )
            self._insert_holders(c, attempt.id, attempt.holders)
            written = {int(seq) for (seq,) in c.execute(
                "SELECT seq FROM stops WHERE attempt_id = ?", (attempt.id,))}
            self._insert_stops(c, attempt.id, [s for s in attempt.stops if s.seq not in written],
                               issued=True)

    def _insert_stops(self, c: sqlite3.Connection, attempt_id: int,
                      stops: Sequence[Stop], *, issued: bool) -> list[int]:
        """Insert stop rows; ``issued`` False: written ahead, the stop not yet answered."""
        boot = self.proc.boot_id()
        ids = []
        for st in stops:
            cur = c.execute(
                "INSERT INTO stops (attempt_id, seq, owner, kind, name, uid, stopped, boot_id,"
                " issued) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (attempt_id, st.seq, st.owner.key, st.owner.kind, st.owner.name, st.owner.uid,
                 st.stopped, st.boot_id or boot, (st.issued or st.stopped) if issued else None))
            ids.append(int(cur.lastrowid or 0))
        return ids

    def stopping(self, attempt_id: int, stops: Sequence[Stop]) -> list[int]:
        """Write down the jobs about to be stopped, before the stop is issued; their row ids.

        Committed first, so a guard killed at any point after it (the stop
        job queued, the engine's stop sent) leaves a row that ``restore``
        acts on; :meth:`stop_issued` completes them.
        """
        with self._tx() as c:
            return self._insert_stops(c, attempt_id, stops, issued=False)

    def stop_issued(self, taken: Sequence[int], refused: Sequence[int],
                    when: float | None = None) -> None:
        """The supervisor took these stops; those it refused never happened (their rows go)."""
        with self._tx() as c:
            c.executemany("UPDATE stops SET issued=? WHERE id=?",
                          [(when or time.time(), i) for i in taken])
            c.executemany("DELETE FROM stops WHERE id=? AND result IS NULL",
                          [(i,) for i in refused])

    @staticmethod
    def _insert_holders(c: sqlite3.Connection, attempt_id: int,
                        holders: Sequence[HolderRecord]) -> None:
        c.executemany(
            "INSERT INTO holders (attempt_id, pid, start_time, user, unit, comm, cmdline,"
            " action, rule, outcome, seconds, why, source, round, owner, uid, exe)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(attempt_id, r.holder.pid, r.holder.start_time, r.holder.user, r.holder.unit,
              r.holder.comm, r.holder.command, r.decision.action, r.decision.rule,
              r.outcome.kind, r.outcome.seconds, r.why, r.holder.source, r.round, r.owner.key,
              r.holder.uid if r.holder.uid >= 0 else None, r.holder.exe or None)
             for r in holders],
        )

    def drain_times(self, holder: Holder, n: int = 5) -> tuple[float, ...]:
        """How long the same job took to exit after its signal in earlier real drains, newest first.

        The same job: the same unit (a service, not a login's scope), else the
        same uid and executable. Empty when the history has none, or cannot say.
        """
        if not self._holder_columns() >= {"uid", "exe"}:
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
        return tuple(float(r[0]) for r in rows)

    def record_restore(self, stop_id: int, result: str, why: str,
                       when: float | None = None) -> None:
        with self._tx() as c:
            c.execute("UPDATE stops SET restored=?, result=?, why=? WHERE id=?",
                      (when or time.time(), result, why, stop_id))

    def record_hold(self, stop_id: int, why: str) -> None:
        """Keep a job stopped after resume (its device is unhealthy): the next restore retries it."""
        with self._tx() as c:
            c.execute("UPDATE stops SET restored=NULL, result='held', why=? WHERE id=?",
                      (why, stop_id))

    def record_health(self, attempt_id: int | None, rows: Sequence[DeviceHealth]) -> None:
        """One health check's answers, stamped with one time."""
        now = time.time()
        with self._tx() as c:
            c.executemany(
                "INSERT INTO health (time, attempt_id, device, family, state, reason)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(now, attempt_id, r.device, r.family, r.state, r.reason) for r in rows])

    def last_health(self) -> list[DeviceHealth]:
        """The answers of the last health check (none before the first)."""
        try:
            with self._reading():
                rows = self.conn.execute(
                    "SELECT device, family, state, reason, time, attempt_id FROM health"
                    " WHERE time = (SELECT MAX(time) FROM health) ORDER BY id").fetchall()
        except sqlite3.OperationalError:
            return []  # a file from before health checks were recorded, opened read-only
        return [DeviceHealth(r[0], r[1], cast(HealthState, r[2]), r[3], time=r[4], attempt_id=r[5])
                for r in rows]

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
        columns = "boot_id, issued" if self._stop_columns() >= {"boot_id", "issued"} \
            else "'', stopped"
        try:
            rows = self.conn.execute(
                "SELECT attempt_id, seq, owner, kind, name, uid, stopped,"
                f" restored, result, why, id, {columns} FROM stops WHERE {where}"
                " ORDER BY attempt_id, seq", tuple(args)).fetchall()
        except sqlite3.OperationalError:
            return []  # a file from before stops were recorded, opened read-only
        # The owner from its kind, name and uid (its key, the owner column, follows from them).
        return [Stop(Owner(cast(OwnerKind, r[3]), r[4], uid=r[5]), seq=r[1], stopped=r[6],
                     attempt_id=r[0], restored=r[7], result=r[8], why=r[9], id=r[10],
                     boot_id=r[11], issued=r[12])
                for r in rows]

    def _stop_columns(self) -> set[str]:
        if not hasattr(self, "_stops_columns"):
            self._stops_columns = {str(c[1]) for c in self.conn.execute("PRAGMA table_info(stops)")}
        return self._stops_columns

    def record_event(self, phase: str, action: str | None, note: str = "",
                     attempt_id: int | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO events (time, attempt_id, phase, action, note) VALUES (?, ?, ?, ?, ?)",
                (time.time(), attempt_id, phase, action, note),
            )

    def record_findings(self, attempt_id: int, findings: Sequence[LogFinding]) -> None:
        with self._tx() as c:
            c.executemany(
                "INSERT INTO findings (attempt_id, rule, severity, file, line, time, pid, text)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(attempt_id, f.rule, f.severity, f.file, f.line,
                  f.time.isoformat() if f.time else None, f.pid, f.text) for f in findings],
            )

    # -- reading ------------------------------------------------------------

    def attempts(self, n: int = 20, include_dry_run: bool = True) -> list[Attempt]:
        where = "" if include_dry_run else "WHERE dry_run = 0"
        with self._reading():
            rows = self.conn.execute(
                f"SELECT {_ATTEMPT_COLUMNS} FROM attempts {where} ORDER BY id DESC LIMIT ?",
                (min(n, _MAX_ROWS),),
            ).fetchall()
            attempts = [self._attempt(r) for r in rows]
        return [a for a in attempts if a is not None]

    def attempt(self, attempt_id: int) -> Attempt | None:
        with self._reading():
            rows = self.conn.execute(
                f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE id = ?", (attempt_id,),
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
        verdict = r[6]
        if verdict is None:
            verdict = "running" if self._alive(r[10], r[11]) else "interrupted"
        owner = "owner" if self._holder_columns() >= {"owner"} else "'plain'"
        holders = tuple(
            _holder(h) for h in self.conn.execute(
                "SELECT pid, start_time, user, unit, comm, cmdline, action, rule, outcome, seconds,"
                f" why, source, round, {owner} FROM holders WHERE attempt_id = ? ORDER BY rowid",
                (r[0],),
            )
        )
        findings = tuple(
            {"rule": f[0], "severity": f[1], "file": f[2], "line": f[3], "time": f[4],
             "pid": f[5], "text": f[6]}
            for f in self.conn.execute(
                "SELECT rule, severity, file, line, time, pid, text FROM findings"
                " WHERE attempt_id = ? ORDER BY rowid", (r[0],),
            )
        )
        events = tuple(
            {"time": iso(e[0]), "phase": e[1], "action": e[2], "note": e[3]}
            for e in self.conn.execute(
                "SELECT time, phase, action, note FROM events WHERE attempt_id = ? ORDER BY id",
                (r[0],),
            )
        )
        return Attempt(
            id=r[0], started=r[1], finished=r[2], action=r[3], origin=r[4], dry_run=bool(r[5]),
            verdict=cast(AttemptVerdict, verdict), reasons=texts(r[7]), warnings=texts(r[8]),
            config_digest=r[9], holders=holders, findings=findings, events=events,
            stops=tuple(self._stops("attempt_id = ?", (r[0],))),
        )

    def _holder_columns(self) -> set[str]:
        if not hasattr(self, "_columns"):
            self._columns = {str(c[1]) for c in self.conn.execute("PRAGMA table_info(holders)")}
        return self._columns

    def events(self, n: int = 20) -> list[dict[str, Any]]:
        with self._reading():
            rows = self.conn.execute(
                "SELECT time, attempt_id, phase, action, note FROM events ORDER BY id DESC LIMIT ?",
                (min(n, _MAX_ROWS),),
            ).fetchall()
        out = []
        for e in rows:
            try:
                out.append({"time": iso(e[0]), "attempt_id": e[1], "phase": e[2],
                            "action": e[3], "note": e[4]})
            except (ValueError, TypeError, OverflowError, OSError) as exc:
                self.notes.append(f"event of attempt {e[1]}: damaged row skipped ({exc})")
        return out

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
        sql = "SELECT id FROM attempts WHERE dry_run = 0"
        params: list[Any] = []
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
            row = self.conn.execute(sql + " ORDER BY id DESC LIMIT 1", params).fetchone()
        return self.attempt(row[0]) if row else None


def last_attempt_start(state_dir: str) -> datetime | None:
    """When the last real suspend attempt started (for ``logs --since last-attempt``)."""
    try:
        with History.open(state_dir, readonly=True) as h:
            attempt = h.last_real_attempt()
    except HistoryError:
        return None
    return datetime.fromtimestamp(attempt.started) if attempt else None
