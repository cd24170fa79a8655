"""The history's SQLite file: its schema, and opening it for writing or for reading.

Written in WAL mode so a reader never blocks the guard. The folder is the
writer's own (mode 0700) and the files are 0600: the history holds every
user's command lines, and a file others can open is a file others can lock.
A symlink, a hard link or a file of another owner in place of a database
file is refused, never followed. A file that SQLite calls corrupt is moved
aside under a name no other run uses (with its -wal and -shm) and a new one
started.

Opening for writing (the checks, the repair, the schema) runs under a flock
on the folder, one run at a time: a run that opened the corrupt file just
before another moved it aside would otherwise read the new file's -wal as
its own and checkpoint the new pages into the moved-aside original,
destroying the only copy; and two runs adding the same column both fail.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from suspendguard.errors import HistoryError, NoHistory
from suspendguard.store.lock import flock_within

# How long one write waits for a lock another process holds, at most.
LOCK_WAIT_S = 5.0
SUFFIXES = ("", "-wal", "-shm")

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
CREATE TABLE IF NOT EXISTS health (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    attempt_id INTEGER,
    device TEXT NOT NULL, family TEXT NOT NULL, state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS health_before (
    attempt_id INTEGER NOT NULL REFERENCES attempts(id),
    device TEXT NOT NULL, family TEXT NOT NULL, word TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS holders_attempt ON holders(attempt_id);
CREATE INDEX IF NOT EXISTS findings_attempt ON findings(attempt_id);
"""


def prepare_dir(state_dir: str) -> None:
    """Create the state folder (0700) or check that it is this user's own; no symlink."""
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
    except FileExistsError:  # something else than a folder there (EEXIST says "File exists")
        raise HistoryError(f"state folder {state_dir}: not a directory") from None
    except OSError as exc:
        raise HistoryError(f"cannot create {state_dir}: {exc.strerror}") from None
    try:
        fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = ("is a symlink; refusing to follow it" if exc.errno in (errno.ELOOP, errno.ENOTDIR)
               else exc.strerror)
        raise HistoryError(f"state folder {state_dir}: {why}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise HistoryError(f"state folder {state_dir}: owned by uid {st.st_uid}, "
                               f"not by this user (uid {os.geteuid()}); refusing to write there")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o700)
    except OSError as exc:
        raise HistoryError(f"state folder {state_dir}: {exc.strerror}") from None
    finally:
        os.close(fd)


def open_writable(path: str, warnings: list[str],
                  wait_s: float = LOCK_WAIT_S) -> sqlite3.Connection:
    """Open or create the file, replacing a corrupt one; a replacement is told in ``warnings``.

    ``wait_s``: how long opening may wait for another process's lock.
    """
    with _opening(path, wait_s):
        return _open_writable(path, warnings, wait_s)


@contextlib.contextmanager
def _opening(path: str, wait_s: float) -> Iterator[None]:
    """Hold the folder's flock (waiting at most ``wait_s``) while the file is opened."""
    folder = os.path.dirname(path) or "."
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise HistoryError(f"cannot open {path}: {folder}: {exc.strerror}") from None
    try:
        try:
            had = flock_within(fd, wait_s)
        except OSError as exc:
            raise HistoryError(f"cannot open {path}: cannot lock {folder}: "
                               f"{exc.strerror}") from None
        if not had:
            raise HistoryError(f"cannot open {path}: another run is opening it "
                               f"(waited {wait_s:.1f} s)")
        yield
    finally:
        os.close(fd)  # releases the flock


def _open_writable(path: str, warnings: list[str], wait_s: float) -> sqlite3.Connection:
    inode = _own_files(path)
    try:
        return _connect_rw(path, wait_s)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError) and not _looks_corrupt(exc):
            raise HistoryError(f"cannot open {path}: {exc}") from None
        aside = _move_aside(path, inode)
        if aside:  # one line, though SQLite's check answers in several
            why = "; ".join(str(exc).splitlines())
            warnings.append(f"history database {path} was unreadable ({why[:300]}); moved to "
                            f"{aside}, started a new one; {_stopped_in(aside)}")
    _own_files(path)
    try:
        return _connect_rw(path, wait_s)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"cannot open {path}: {exc}") from None


def _stopped_in(aside: str) -> str:
    """The jobs a moved-aside file still names as stopped: the new file cannot start them."""
    try:
        with contextlib.closing(sqlite3.connect(f"{_uri(aside)}?mode=ro", uri=True)) as conn:
            owners = [str(o) for (o,) in conn.execute(
                "SELECT DISTINCT owner FROM stops WHERE result IS NULL OR result = 'held'")]
    except sqlite3.Error:
        return "a job it recorded as stopped is not started again (its stops are unreadable)"
    if not owners:
        return "it recorded no job left stopped"
    return f"the jobs it recorded as stopped are not started again: {', '.join(owners)}"


def _uri(path: str) -> str:
    """The file's URI: a "#", "?" or "%" in a folder's name is the path's, not the URI's."""
    return "file:" + urllib.parse.quote(os.path.abspath(path))


class _Connection(sqlite3.Connection):
    """A connection that makes text encodable before binding it.

    What /proc gives (an executable's path) may hold bytes that are no UTF-8,
    which Python keeps as lone surrogates and SQLite refuses with a
    UnicodeEncodeError: a traceback in every run while such a job holds the
    device. They are bound as ``\\udcXX`` escapes, on write and read alike, so
    that a job's path still matches itself.
    """

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, _encodable(parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (_encodable(p) for p in parameters))


def _encodable(parameters: Any) -> Any:
    if isinstance(parameters, Mapping):
        return {k: _text(v) for k, v in parameters.items()}
    return tuple(_text(v) for v in parameters)


def _text(value: object) -> object:
    if isinstance(value, str) and not value.isascii():
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def open_readonly(path: str) -> sqlite3.Connection:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NoHistory(f"no history yet ({path} does not exist)") from None
    except OSError as exc:
        raise HistoryError(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise HistoryError(f"cannot read {path}: not a regular file (a symlink is never followed)")
    if not os.access(path, os.R_OK):
        raise HistoryError(f"cannot read {path}: permission denied (the history is readable "
                           "by its owner only)")
    try:
        conn = sqlite3.connect(f"{_uri(path)}?mode=ro", uri=True, timeout=2.0,
                               factory=_Connection)
        conn.execute("SELECT count(*) FROM attempts").fetchone()
        return conn
    except sqlite3.Error:
        pass
    try:
        # Without write access to the folder SQLite cannot use the WAL index;
        # immutable=1 reads the last checkpointed state instead.
        conn = sqlite3.connect(f"{_uri(path)}?immutable=1", uri=True, timeout=2.0,
                               factory=_Connection)
        conn.execute("SELECT count(*) FROM attempts").fetchone()
        return conn
    except sqlite3.Error as exc:
        if "no such table" in str(exc):
            # The first guard has made the file and not yet its tables.
            raise NoHistory(f"no history yet ({path} has no attempts table yet)") from None
        raise HistoryError(f"cannot read {path}: {exc}") from None


def _own_files(path: str) -> int:
    """Check that those of the database file, its -wal and -shm that exist are ours, not links.

    Each is made 0600. SQLite creates the missing ones (a reader must never
    find an empty file where the database will be), inside the folder that
    only we can write. Returns the database file's inode (0: none yet), to
    tell later whether it is still the same file.

    Looked at by path, never opened: closing any descriptor of a file drops
    every POSIX lock this process holds on it, SQLite's own included, and the
    next process to open the database would take itself for its only user
    (it rebuilds the -shm under a live connection: rows lost, SIGBUS).
    """
    inode = 0
    for suffix in SUFFIXES:
        name = path + suffix
        try:
            st = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise HistoryError(f"cannot open {name}: {exc.strerror}") from None
        if stat.S_ISLNK(st.st_mode):
            raise HistoryError(f"cannot open {name}: is a symlink; refusing to follow it")
        if not stat.S_ISREG(st.st_mode):
            raise HistoryError(f"cannot open {name}: not a regular file")
        if st.st_uid != os.geteuid() or st.st_nlink != 1:
            raise HistoryError(f"cannot open {name}: owned by uid {st.st_uid} or linked "
                               f"elsewhere ({st.st_nlink} links); refusing to write it")
        if stat.S_IMODE(st.st_mode) != 0o600:
            try:  # a regular file of ours, in a folder only we can write: still that file
                os.chmod(name, 0o600)
            except OSError as exc:
                raise HistoryError(f"cannot open {name}: {exc.strerror}") from None
        if not suffix:
            inode = st.st_ino
    return inode


def _connect_rw(path: str, wait_s: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=max(0.0, wait_s), isolation_level="DEFERRED",
                           factory=_Connection)
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
    try:
        _own_files(path)  # what SQLite has just made, the -wal and -shm included
    except HistoryError:
        conn.close()
        raise
    return conn


# Columns added since the first schema: (table, column, declaration). A file
# written by an older version gains them when it is next opened for writing.
COLUMNS_ADDED = (
    ("holders", "owner", "TEXT NOT NULL DEFAULT 'plain'"),
    # The boot a stop was made in (/proc/sys/kernel/random/boot_id): a stop of
    # an earlier boot is not started again on its own (guard/restore.py).
    ("stops", "boot_id", "TEXT NOT NULL DEFAULT ''"),
    # When the supervisor took the stop; NULL while it was being issued (a
    # row written ahead of the stop that the guard never saw answered).
    ("stops", "issued", "REAL"),
    # Who ran a holder and what: a job's earlier drain times are looked up by
    # its unit, or by its uid and executable (History.drain_times).
    ("holders", "uid", "INTEGER"),
    ("holders", "exe", "TEXT"),
    # Each reason's code and what it is about (model.Reason), beside its words in reasons.
    ("attempts", "reason_details", "TEXT"),
    # A holder's own log folders (model.Holder.log_dirs), a JSON list: read after resume.
    ("holders", "log_dirs", "TEXT"),
    # Whether the drain signal reached a holder (model.Outcome.signalled), and the boot an
    # attempt ran in: a later attempt of the same boot sends it no second one.
    ("holders", "signalled", "INTEGER"),
    ("attempts", "boot_id", "TEXT NOT NULL DEFAULT ''"),
)


def _migrate(conn: sqlite3.Connection) -> None:
    for table, column, decl in COLUMNS_ADDED:
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if column not in have:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
    conn.commit()


def _looks_corrupt(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("not a database", "malformed", "corrupt", "integrity"))


def _move_aside(path: str, inode: int) -> str | None:
    """Move the corrupt file aside; None when another run already has (it is another file now)."""
    try:
        if os.lstat(path).st_ino != inode:
            return None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HistoryError(f"cannot move {path} aside: {exc.strerror}") from None
    # Unique per run: two guards finding the same corrupt file never share a name.
    aside = f"{path}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(4).hex()}"
    for suffix in SUFFIXES:
        try:
            os.rename(path + suffix, aside + suffix)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise HistoryError(f"cannot move {path}{suffix} aside: {exc.strerror}") from None
    return aside
