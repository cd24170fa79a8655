"""The history of suspend attempts: SQLite (WAL) in the state directory.

An attempt row is written when the attempt begins and completed in one
transaction at its end, so a guard killed with SIGKILL leaves a row that the
next open marks ``interrupted``: never lost, never half-written. A corrupt
file is moved aside and a new one started. Failing to write history never
changes a verdict; the caller gets the reason as a warning.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from suspendguard.system.procfs import ProcFS

if TYPE_CHECKING:
    from typing import Any

DB_NAME = "history.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started REAL NOT NULL,
    finished REAL,
    action TEXT,
    origin TEXT NOT NULL,
    dry_run INTEGER NOT NULL,
    verdict TEXT,
    reasons TEXT NOT NULL DEFAULT '[]',
    warnings TEXT NOT NULL DEFAULT '[]',
    config_digest TEXT NOT NULL DEFAULT '',
    guard_pid INTEGER NOT NULL,
    guard_start INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS holders (
    attempt_id INTEGER NOT NULL REFERENCES attempts(id),
    pid INTEGER NOT NULL,
    start_time INTEGER NOT NULL,
    user TEXT, unit TEXT, comm TEXT, cmdline TEXT,
    action TEXT NOT NULL, rule TEXT,
    outcome TEXT NOT NULL, seconds REAL, why TEXT,
    source TEXT, round INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    attempt_id INTEGER,
    phase TEXT NOT NULL,
    action TEXT,
    note TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS findings (
    attempt_id INTEGER NOT NULL REFERENCES attempts(id),
    rule TEXT NOT NULL, severity TEXT, file TEXT, line INTEGER,
    time TEXT, pid INTEGER, text TEXT
);
CREATE INDEX IF NOT EXISTS holders_attempt ON holders(attempt_id);
CREATE INDEX IF NOT EXISTS findings_attempt ON findings(attempt_id);
"""


class HistoryError(Exception):
    """History could not be opened or written; the message is the reason."""


@dataclass(frozen=True, slots=True)
class HolderRow:
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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Attempt:
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

    @property
    def duration(self) -> float | None:
        return None if self.finished is None else self.finished - self.started

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "started": _iso(self.started),
            "finished": _iso(self.finished) if self.finished is not None else None,
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
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _alive(pid: int, start: int) -> bool:
    try:
        st = ProcFS().stat(pid)
    except Exception:
        return False
    return st is not None and st.start_time == start


class History:
    def __init__(self, conn: sqlite3.Connection, path: str, warnings: list[str]) -> None:
        self.conn = conn
        self.path = path
        self.warnings = warnings

    # -- opening ------------------------------------------------------------

    @classmethod
    def open(cls, state_dir: str, readonly: bool = False) -> History:
        """Open (or create) the database; raises HistoryError with the reason."""
        # os.path, not pathlib: this runs in the sleep hook, and pathlib's
        # imports are a noticeable part of its start-up.
        path = os.path.join(state_dir, DB_NAME)
        warnings: list[str] = []
        if readonly:
            if not os.path.exists(path):
                raise HistoryError(f"no history yet ({path} does not exist)")
            return cls(_connect_ro(path), path, warnings)
        try:
            os.makedirs(state_dir, mode=0o755, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"cannot create {state_dir}: {exc.strerror}") from None
        try:
            conn = _connect_rw(path)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and not _looks_corrupt(exc):
                raise HistoryError(f"cannot open {path}: {exc}") from None
            aside = _move_aside(path)
            warnings.append(f"history database {path} was unreadable ({exc}); moved to {aside}, "
                            "started a new one")
            try:
                conn = _connect_rw(path)
            except sqlite3.DatabaseError as exc2:
                raise HistoryError(f"cannot open {path}: {exc2}") from None
        history = cls(conn, path, warnings)
        history._mark_interrupted()
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
            with self.conn:
                yield self.conn
        except sqlite3.Error as exc:
            raise HistoryError(f"cannot write {self.path}: {exc}") from None

    def _mark_interrupted(self) -> None:
        rows = self.conn.execute(
            "SELECT id, guard_pid, guard_start FROM attempts WHERE verdict IS NULL"
        ).fetchall()
        dead = [r[0] for r in rows if not _alive(r[1], r[2])]
        if dead:
            with self._tx() as c:
                c.executemany(
                    "UPDATE attempts SET verdict='interrupted', reasons=? WHERE id=?",
                    [(json.dumps(["the guard was killed before it gave a verdict"]), i)
                     for i in dead],
                )

    # -- writing ------------------------------------------------------------

    def begin(self, action: str | None, origin: str, dry_run: bool, digest: str,
              started: float | None = None) -> int:
        me = ProcFS().stat(os.getpid())
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO attempts (started, action, origin, dry_run, config_digest, guard_pid,"
                " guard_start) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (started or time.time(), action, origin, int(dry_run), digest, os.getpid(),
                 me.start_time if me else 0),
            )
            return int(cur.lastrowid or 0)

    def finish(self, attempt_id: int, verdict: str, reasons: Sequence[str],
               warnings: Sequence[str], holders: Sequence[HolderRow],
               finished: float | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "UPDATE attempts SET finished=?, verdict=?, reasons=?, warnings=? WHERE id=?",
                (finished or time.time(), verdict, json.dumps(list(reasons)),
                 json.dumps(list(warnings)), attempt_id),
            )
            c.executemany(
                "INSERT INTO holders (attempt_id, pid, start_time, user, unit, comm, cmdline,"
                " action, rule, outcome, seconds, why, source, round)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(attempt_id, h.pid, h.start_time, h.user, h.unit, h.comm, h.cmdline, h.action,
                  h.rule, h.outcome, h.seconds, h.why, h.source, h.round) for h in holders],
            )

    def record_event(self, phase: str, action: str | None, note: str = "",
                     attempt_id: int | None = None) -> None:
        with self._tx() as c:
            c.execute(
                "INSERT INTO events (time, attempt_id, phase, action, note) VALUES (?, ?, ?, ?, ?)",
                (time.time(), attempt_id, phase, action, note),
            )

    def record_findings(self, attempt_id: int, findings: Sequence[Any]) -> None:
        """Store log findings (objects with rule, severity, file, line, time, pid, text)."""
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
        rows = self.conn.execute(
            "SELECT id, started, finished, action, origin, dry_run, verdict, reasons, warnings,"
            f" config_digest, guard_pid, guard_start FROM attempts {where}"
            " ORDER BY id DESC LIMIT ?", (n,),
        ).fetchall()
        return [self._attempt(r) for r in rows]

    def attempt(self, attempt_id: int) -> Attempt | None:
        rows = self.conn.execute(
            "SELECT id, started, finished, action, origin, dry_run, verdict, reasons, warnings,"
            " config_digest, guard_pid, guard_start FROM attempts WHERE id = ?", (attempt_id,),
        ).fetchall()
        return self._attempt(rows[0]) if rows else None

    def _attempt(self, r: Sequence[Any]) -> Attempt:
        verdict = r[6]
        if verdict is None:
            verdict = "running" if _alive(r[10], r[11]) else "interrupted"
        holders = tuple(
            HolderRow(*h) for h in self.conn.execute(
                "SELECT pid, start_time, user, unit, comm, cmdline, action, rule, outcome, seconds,"
                " why, source, round FROM holders WHERE attempt_id = ? ORDER BY rowid", (r[0],),
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
            {"time": _iso(e[0]), "phase": e[1], "action": e[2], "note": e[3]}
            for e in self.conn.execute(
                "SELECT time, phase, action, note FROM events WHERE attempt_id = ? ORDER BY id",
                (r[0],),
            )
        )
        return Attempt(
            id=r[0], started=r[1], finished=r[2], action=r[3], origin=r[4], dry_run=bool(r[5]),
            verdict=verdict, reasons=tuple(json.loads(r[7])), warnings=tuple(json.loads(r[8])),
            config_digest=r[9], holders=holders, findings=findings, events=events,
        )

    def events(self, n: int = 20) -> list[dict[str, Any]]:
        return [
            {"time": _iso(e[0]), "attempt_id": e[1], "phase": e[2], "action": e[3], "note": e[4]}
            for e in self.conn.execute(
                "SELECT time, attempt_id, phase, action, note FROM events ORDER BY id DESC LIMIT ?",
                (n,),
            )
        ]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.conn.execute(
            "SELECT id, verdict, guard_pid, guard_start FROM attempts WHERE dry_run = 0"
        ):
            verdict = r[1] or ("running" if _alive(r[2], r[3]) else "interrupted")
            out[verdict] = out.get(verdict, 0) + 1
        return out

    def finding_counts(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.conn.execute(
            "SELECT rule, count(*) FROM findings GROUP BY rule")}

    def last_real_attempt(self, action: str | None = None, since: float | None = None
                          ) -> Attempt | None:
        sql = "SELECT id FROM attempts WHERE dry_run = 0"
        params: list[Any] = []
        if action is not None:
            sql += " AND action = ?"
            params.append(action)
        if since is not None:
            sql += " AND started >= ?"
            params.append(since)
        row = self.conn.execute(sql + " ORDER BY id DESC LIMIT 1", params).fetchone()
        return self.attempt(row[0]) if row else None


def _connect_rw(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=5.0, isolation_level="DEFERRED")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        check = conn.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else '?'}")
        conn.executescript(_SCHEMA)
    except sqlite3.Error:
        conn.close()
        raise
    with contextlib.suppress(OSError):
        os.chmod(path, 0o644)
    return conn


def _connect_ro(path: str) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2.0)
        conn.execute("SELECT count(*) FROM attempts").fetchone()
        return conn
    except sqlite3.Error:
        pass
    try:
        # A reader without write access to the folder cannot use the WAL
        # index; immutable=1 reads the last checkpointed state instead.
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True, timeout=2.0)
        conn.execute("SELECT count(*) FROM attempts").fetchone()
        return conn
    except sqlite3.Error as exc:
        raise HistoryError(f"cannot read {path}: {exc}") from None


def _looks_corrupt(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("not a database", "malformed", "corrupt", "integrity"))


def _move_aside(path: str) -> str:
    aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside


def last_attempt_start(state_dir: str) -> datetime | None:
    """When the last real suspend attempt started (for ``logs --since last-attempt``)."""
    try:
        with History.open(state_dir, readonly=True) as h:
            attempt = h.last_real_attempt()
    except HistoryError:
        return None
    return datetime.fromtimestamp(attempt.started) if attempt else None
