"""The history of suspend attempts: writing them down and reading them back.

An attempt row is written when the attempt begins and completed in one transaction at its end,
so a guard killed with SIGKILL leaves a row that the next open marks ``interrupted``: never
lost, never half-written. Whether that guard still runs is read through the caller's
:class:`ProcFS`, the same /proc the guard itself sees. Failing to write history never changes
a verdict; the caller gets the reason as a warning, and no wait for the database's lock runs
past the deadline the caller gives. A damaged file or row makes reading fail with a
HistoryError or skip the row, saying so in ``notes``, never a traceback. The file itself is
:mod:`.database`'s.

What is written and read back are the records of suspendguard/record.py: this module and its
reading half (:mod:`.reads`) are the only code that knows their columns. A record read back
has only the fields the history keeps (each record's type says which); the others are their
empty defaults.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from suspendguard.config import Config, to_toml
from suspendguard.errors import HistoryError, NoHistory
from suspendguard.model import Holder, HolderId, holder_id
from suspendguard.record import (
    Attempt,
    DeviceHealth,
    FindingRecord,
    HolderRecord,
    KeptRecord,
    Stop,
)
from suspendguard.store import database, reserve
from suspendguard.store.reads import INTERRUPTED, Reads
from suspendguard.system.boot import boot_id, boot_ids
from suspendguard.system.deadline import Deadline
from suspendguard.system.procfs import ProcFS
from suspendguard.verdict import Reason

DB_NAME = "history.db"
T = TypeVar("T")


# The why of a row written ahead once the signal reached its holder; :meth:`History.finish`
# replaces it with the outcome, so it stays only where the guard was killed in its wait.
REACHED = ("the signal reached it (the guard's, or its launcher's forward); the guard ended "
           "before it recorded the outcome")


def _left(deadline: Deadline) -> float:
    """Seconds a lock may still be waited for before ``deadline``."""
    return deadline.cap(database.LOCK_WAIT_S)


class History(Reads):
    def __init__(self, conn: sqlite3.Connection, path: str, warnings: list[str],
                 proc: ProcFS, deadline: Deadline | None = None) -> None:
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
             proc: ProcFS | None = None, deadline: Deadline | None = None) -> History:
        """Open (or create) the database; raises HistoryError with the reason.

        ``proc``: the /proc that tells whether a recorded guard still runs
        (default: the host's). ``deadline``: the run's, which no wait for the
        database's lock may pass (default: each waits at most
        database.LOCK_WAIT_S).
        """
        proc = proc or ProcFS()
        path = os.path.join(state_dir, DB_NAME)
        warnings: list[str] = []
        if readonly:
            return cls(database.open_readonly(path), path, warnings, proc)
        database.prepare_dir(state_dir)
        wait = database.LOCK_WAIT_S if deadline is None else _left(deadline)
        # A full disk where SQLite has no shared-memory file yet: opened in the room kept.
        history = cls(reserve.in_reserve(state_dir, lambda: database.open_writable(
            path, warnings, wait)), path, warnings, proc, deadline)
        try:
            history._mark_interrupted()
        except HistoryError as exc:
            if "full" not in str(exc):
                history.close()
                raise
            # A full disk: restore must still read the stops it acts on, and the room kept
            # is the next attempt's (:meth:`begin`). Read back as interrupted all the same
            # (their guard is gone), they are marked at the next open.
            warnings.append(f"{exc}: an attempt whose guard was killed is not marked "
                            "interrupted yet (the next open marks it)")
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

    def _mark_interrupted(self) -> None:
        with self._reading():
            rows = self.conn.execute(
                "SELECT id, guard_pid, guard_start FROM attempts WHERE verdict IS NULL").fetchall()
        dead = [r[0] for r in rows if not self._alive(r[1], r[2])]
        if dead:
            # Read outside the write: a verdict committed since (its guard just ended) stands.
            with self._tx() as c:
                c.executemany(
                    "UPDATE attempts SET verdict='interrupted', reasons=?, reason_details=?"
                    " WHERE id=? AND verdict IS NULL",
                    [(json.dumps([INTERRUPTED.text]), json.dumps([INTERRUPTED.to_json()]), i)
                     for i in dead],
                )

    # -- writing ------------------------------------------------------------

    @staticmethod
    def digest(config: Config) -> str:
        """A short fingerprint of the effective values: the attempt's ``config_digest``."""
        return hashlib.sha256(to_toml(config).encode()).hexdigest()[:16]

    def _kept(self, write: Callable[[sqlite3.Connection], T]) -> T:
        """``write`` in one transaction; on a full disk, once more in the room kept (.reserve)."""
        def once() -> T:
            with self._tx() as c:
                return write(c)
        return reserve.in_reserve(os.path.dirname(self.path), once)

    def begin(self, action: str | None, origin: str, dry_run: bool, digest: str,
              started: float | None = None) -> int:
        me = self.proc.stat(os.getpid())
        # A full disk: begun in the room kept, or whom it signals goes unrecorded (.reserve).
        attempt_id = self._kept(lambda c: int(c.execute(
            "INSERT INTO attempts (started, action, origin, dry_run, config_digest, guard_pid,"
            " guard_start, boot_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (started or time.time(), action, origin, int(dry_run), digest, os.getpid(),
             me.start_time if me else 0, boot_id(self.proc))).lastrowid or 0))
        # While there is room: keep some for this attempt (see .reserve).
        reserve.keep(os.path.dirname(self.path))
        return attempt_id

    def failed(self, attempt_id: int, reason: Reason) -> None:
        """End an attempt the guard could not finish (an error, not a kill) with no verdict,
        and why: the next open would read it as killed."""
        with self._tx() as c:
            c.execute("UPDATE attempts SET verdict='interrupted', reasons=?, reason_details=?"
                      " WHERE id=? AND verdict IS NULL",
                      (json.dumps([reason.text]), json.dumps([reason.to_json()]), attempt_id))

    def signalling(self, attempt_id: int, holders: Sequence[HolderRecord]) -> None:
        """Write down who is about to be signalled, before the signal: a guard killed
        mid-drain leaves these rows; :meth:`finish` replaces them with the outcomes."""
        self._kept(lambda c: self._insert_holders(c, attempt_id, holders))

    def reached(self, attempt_id: int, holders: Sequence[Holder]) -> None:
        """Mark the rows :meth:`signalling` wrote for ``holders``: the signal reached them. A
        guard killed in the wait after it leaves them so, and the next attempt sends none again."""
        self._kept(lambda c: c.executemany(
            "UPDATE holders SET signalled = 1, why = ? WHERE attempt_id = ? AND pid = ?"
            " AND start_time = ?", [(REACHED, attempt_id, h.pid, h.start_time) for h in holders]))

    def finish(self, attempt: Attempt) -> None:
        """Write the attempt as the guard ended it: its verdict, reasons, warnings, end,
        holders, and the stops whose rows are not in yet (:meth:`stopping` wrote the others)."""
        # The disk filled during the run: the verdict is written in the room kept for it.
        self._kept(lambda c: self._finish(c, attempt))

    def _finish(self, c: sqlite3.Connection, attempt: Attempt) -> None:
        c.execute("DELETE FROM holders WHERE attempt_id = ?", (attempt.id,))
        c.execute(
            "UPDATE attempts SET finished=?, verdict=?, reasons=?, reason_details=?, warnings=?"
            " WHERE id=?",
            (attempt.finished or time.time(), attempt.result,
             json.dumps(list(attempt.reasons)),
             json.dumps([r.to_json() for r in attempt.verdict.reasons]),
             json.dumps(list(attempt.warnings)), attempt.id),
        )
        self._insert_holders(c, attempt.id, attempt.holders)
        written = {int(seq) for (seq,) in c.execute(
            "SELECT seq FROM stops WHERE attempt_id = ?", (attempt.id,))}
        self._insert_stops(c, attempt.id, [s for s in attempt.stops if s.seq not in written],
                           issued=True)

    def _insert_stops(self, c: sqlite3.Connection, attempt_id: int,
                      stops: Sequence[Stop], *, issued: bool) -> list[int]:
        """Insert stop rows; ``issued`` False: written ahead, the stop not yet answered."""
        boot = boot_id(self.proc)
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
                        holders: Sequence[HolderRecord | KeptRecord]) -> None:
        kept = [r.kept() if isinstance(r, HolderRecord) else r for r in holders]
        c.executemany(
            "INSERT INTO holders (attempt_id, pid, start_time, user, unit, comm, cmdline,"
            " action, rule, outcome, seconds, why, source, round, owner, uid, exe, log_dirs,"
            " signalled) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(attempt_id, r.holder.pid, r.holder.start_time, r.holder.user, r.holder.unit,
              r.holder.comm, r.holder.command, r.action, r.rule, r.outcome.kind,
              r.outcome.seconds, r.outcome.why, r.holder.source, r.round, r.owner.key,
              r.holder.uid, r.holder.exe, json.dumps(list(r.holder.log_dirs)),
              int(r.outcome.signalled))
             for r in kept],
        )

    def record_restore(self, stop_id: int, result: str, why: str,
                       when: float | None = None) -> None:
        """A stop's result; ``pending`` (its job still drains) is kept as none, with why: the
        stop stays pending for the next restore."""
        pending = result == "pending"
        with self._tx() as c:
            c.execute("UPDATE stops SET restored=?, result=?, why=? WHERE id=?",
                      (None if pending else when or time.time(), None if pending else result,
                       why, stop_id))

    def still_draining(self, stop: Stop) -> bool:
        """Whether a holder of ``stop``'s owner that its attempt's signal reached, and that it did
        not see leave (``timeout``; the guard killed in its wait), still runs, same pid and start.
        False for a launcher (cron) whose job left, and where the history cannot say."""
        try:
            with self._reading():
                rows = self.conn.execute(
                    "SELECT pid, start_time FROM holders WHERE attempt_id = ? AND owner = ? AND"
                    " outcome IN ('timeout', 'signalled') AND signalled = 1",
                    (stop.attempt_id, stop.owner.key)).fetchall()
        except HistoryError:
            return False
        return any(self._alive(pid, start) for pid, start in rows)

    def record_hold(self, stop_id: int, why: str) -> None:
        """Keep a job stopped after resume (its device is unhealthy): the next restore retries it."""
        with self._tx() as c:
            c.execute("UPDATE stops SET restored=NULL, result='held', why=? WHERE id=?",
                      (why, stop_id))

    def record_health(self, attempt_id: int | None, rows: Sequence[DeviceHealth]) -> None:
        """One health check's answers, stamped with one time. A check that reached no device
        is one row of none, unknown: the last check is this one, not an earlier one's."""
        now = time.time()
        kept = [(r.device, r.family, r.state, r.reason) for r in rows] or [
            ("none", "", "unknown", "no device checked: no tool answered (restore says why)")]
        with self._tx() as c:
            c.executemany(
                "INSERT INTO health (time, attempt_id, device, family, state, reason)"
                " VALUES (?, ?, ?, ?, ?, ?)", [(now, attempt_id, *r) for r in kept])

    def record_health_before(self, attempt_id: int,
                             words: Sequence[tuple[str, str, str]]) -> None:
        """Each device's own health word as the guard read it before the suspend, as
        (device, family, word): the check after resume compares with it."""
        with self._tx() as c:
            c.executemany("INSERT INTO health_before (attempt_id, device, family, word)"
                          " VALUES (?, ?, ?, ?)", [(attempt_id, *w) for w in words])

    def record_event(self, phase: str, action: str | None, note: str = "",
                     attempt_id: int | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO events (time, attempt_id, phase, action, note) VALUES (?, ?, ?, ?, ?)",
                (time.time(), attempt_id, phase, action, note),
            )

    def record_findings(self, attempt_id: int, findings: Sequence[FindingRecord]) -> None:
        with self._tx() as c:
            c.executemany(
                "INSERT INTO findings (attempt_id, rule, severity, file, line, time, pid, text)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(attempt_id, f.rule, f.severity, f.file, f.line, f.time, f.pid, f.text)
                 for f in findings],
            )

    # -- reading what earlier attempts did -----------------------------------

    def signalled_since(self, holders: Sequence[Holder], but: int = 0
                        ) -> dict[HolderId, tuple[int, float, int]]:
        """Of ``holders``, each that a real attempt of this boot (``but`` that one) sent the
        drain signal and left running (its wait ran out, or the guard was killed in it): each
        with the newest such attempt, when it began, and its guard's start (process ticks);
        empty where the history cannot say (a file from before it kept who was signalled).
        An attempt is of this boot by the boot's names kept with it, else (one written
        before they were kept) by its start on the wall clock."""
        wanted = {holder_id(h) for h in holders}
        this = boot_ids(self.proc)
        booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
        try:
            with self._reading():
                rows = self.conn.execute(
                    "SELECT h.pid, h.start_time, a.id, a.started, a.guard_start, a.boot_id FROM holders h"
                    " JOIN attempts a ON a.id = h.attempt_id WHERE a.dry_run = 0 AND a.id != ?"
                    " AND h.outcome IN ('timeout', 'signalled') AND h.signalled = 1"
                    " ORDER BY a.id",
                    (but,)).fetchall()
        except (sqlite3.Error, HistoryError):
            return {}
        return {(pid, start): (attempt, began, guard) for pid, start, attempt, began, guard, boot in rows
                if (pid, start) in wanted
                and (set(boot.split()) & this if boot and this else began >= booted)}


@dataclass(frozen=True)
class Sleep:
    """The host's newest sleep, as the history tells it."""

    # The attempt it went down after; None: after none (the guard off, the veto unit not run).
    attempt: Attempt | None
    # False: no sleep followed ``attempt``, the newest (it refused, or its guard was killed),
    # though the resume unit runs after it all the same.
    slept: bool = True


def newest_sleep(history: History, config: Config, action: str | None = None) -> Sleep:
    """What the newest sleep (of ``action``) went down after: the attempt the sleep hook's
    ``pre`` names, however long the sleep (a weekend's), or none. An attempt begun after that
    ``pre`` is newer than its sleep: if it refused, no sleep followed it; if it let the sleep
    go ahead, the sleep is its own, that sleep's ``pre`` not written. With no ``pre`` at
    all, the newest attempt a sleep may have followed within a day."""
    pre = history.last_event("pre", action)
    since = pre.time if pre else time.time() - (config.drain.deadline_s + 24 * 3600.0)
    later = history.last_slept_on(action=action, since=since)
    if later is not None:
        return Sleep(later, later.dry_run or later.result == "allow")
    return Sleep(history.attempt(pre.attempt_id) if pre and pre.attempt_id else None)


def last_slept(state_dir: str) -> Attempt | None:
    """The last suspend attempt (for ``logs --since last-attempt``): a real one, or the veto
    unit's look in observe mode, as the check after resume reads them; None when there is no
    history yet. A history that cannot be read raises HistoryError: that is not "no
    attempt"."""
    try:
        with History.open(state_dir, readonly=True) as h:
            return h.last_slept_on()
    except NoHistory:
        return None


def last_attempt_start(state_dir: str) -> datetime | None:
    """When :func:`last_slept`'s attempt started."""
    attempt = last_slept(state_dir)
    return datetime.fromtimestamp(attempt.started) if attempt else None
