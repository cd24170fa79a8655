"""The history's SQLite file: its schema, and opening it for writing or for reading.

Written in WAL mode so a reader never blocks the guard. A file that SQLite
calls corrupt is moved aside (with its -wal and -shm) and a new one started;
a reader without write access to the folder still gets the last
checkpointed state.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time

from suspendguard.errors import HistoryError

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS stops (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    attempt_id INTEGER NOT NULL REFERENCES attempts(id),
    seq INTEGER NOT NULL,
    owner TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL, uid INTEGER,
    stopped REAL NOT NULL,
    restored REAL, result TEXT, why TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS holders_attempt ON holders(attempt_id);
CREATE INDEX IF NOT EXISTS findings_attempt ON findings(attempt_id);
"""


def open_writable(path: str, warnings: list[str]) -> sqlite3.Connection:
    """Open or create the file, replacing a corrupt one; a replacement is told in ``warnings``."""
    try:
        return _connect_rw(path)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and not _looks_corrupt(exc):
            raise HistoryError(f"cannot open {path}: {exc}") from None
        aside = _move_aside(path)
        warnings.append(f"history database {path} was unreadable ({exc}); moved to {aside}, "
                        "started a new one")
    try:
        return _connect_rw(path)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"cannot open {path}: {exc}") from None


def open_readonly(path: str) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise HistoryError(f"no history yet ({path} does not exist)")
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


def _connect_rw(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=5.0, isolation_level="DEFERRED")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        check = conn.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {check[0] if check else '?'}")
        conn.executescript(SCHEMA)
        _migrate(conn)
    except sqlite3.Error:
        conn.close()
        raise
    with contextlib.suppress(OSError):
        os.chmod(path, 0o644)
    return conn


# Columns added since the first schema: (table, column, declaration). A file
# written by an older version gains them when it is next opened for writing.
COLUMNS_ADDED = (("holders", "owner", "TEXT NOT NULL DEFAULT 'plain'"),)


def _migrate(conn: sqlite3.Connection) -> None:
    for table, column, decl in COLUMNS_ADDED:
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    conn.commit()


def _looks_corrupt(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("not a database", "malformed", "corrupt", "integrity"))


def _move_aside(path: str) -> str:
    aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, aside + suffix)
    return aside
