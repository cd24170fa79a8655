"""The history damaged or on a full disk: a page of an index SQLite calls corrupt, a time
that is no number in a row, no room left when restore opens it after a killed guard."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.isolation import needs_root

from suspendguard.model import Owner
from suspendguard.record import DeviceHealth, Stop
from suspendguard.store.history import History

TRAIN = Owner("systemd-service", "train.service")


def stopped(state: Path) -> None:
    """An attempt whose guard stopped train.service, then was killed (no verdict)."""
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.stop_issued(h.stopping(attempt, [Stop(TRAIN, seq=0, stopped=time.time())]), [])
        # As a killed guard leaves it: no verdict, its pid not this process's.
        h.conn.execute("UPDATE attempts SET guard_pid = 0 WHERE id = ?", (attempt,))
        h.conn.commit()


def damage_page(db: Path, index: str) -> None:
    """The root page of ``index`` overwritten, as a bad sector leaves it; the tables readable."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        [root] = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                              (index,)).fetchone()
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    with open(db, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\x0d" + b"\xff" * 20)


def test_a_history_moved_aside_says_in_one_line_which_jobs_it_leaves_stopped(
        tmp_path: Path) -> None:
    """An empty index's page damaged: the stops are still readable, and the new file will
    not have them: the warning names the moved file and the jobs, on one line."""
    state = tmp_path / "state"
    stopped(state)
    damage_page(state / "history.db", "findings_attempt")
    with History.open(str(state)) as h:
        [warning] = h.warnings
        assert h.pending_stops() == []
    [aside] = state.glob("history.db.corrupt-*[0-9a-f]")
    assert "\n" not in warning
    assert warning.startswith(f"history database {state / 'history.db'} was unreadable "
                              "(integrity check failed: ")
    assert f"moved to {aside}, started a new one" in warning
    assert warning.endswith("the jobs it recorded as stopped are not started again: "
                            "systemd-service:train.service")


def test_a_history_that_is_no_database_is_moved_aside_saying_its_stops_are_unread(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "history.db").write_text("not a database\n" * 100)
    (state / "history.db").chmod(0o600)
    with History.open(str(state)) as h:
        [warning] = h.warnings
    assert "\n" not in warning
    assert warning.endswith("a job it recorded as stopped is not started again (its stops "
                            "are unreadable)")


def test_a_health_check_time_that_is_no_number_hides_no_later_check(tmp_path: Path) -> None:
    """SQLite sorts text above every number: MAX(time) would be the damaged row for ever."""
    with History.open(str(tmp_path)) as h:
        h.record_health(None, [DeviceHealth("gpu 0", "nvidia", "unhealthy", "Xid 79")])
        h.conn.execute("UPDATE health SET time = 'garbage'")
        h.conn.commit()
        h.record_health(None, [DeviceHealth("gpu 0", "nvidia", "healthy")])
    with History.open(str(tmp_path), readonly=True) as h:
        [row] = h.last_health()
    assert (row.state, type(row.time)) == ("healthy", float)
    assert row.to_json()["time"]  # an ISO time, no TypeError


def test_an_event_time_that_is_no_number_is_no_newest_event(tmp_path: Path) -> None:
    """The sleep hook compares the newest event's time with a float."""
    with History.open(str(tmp_path)) as h:
        h.record_event("pre", "suspend", "first")
        h.record_event("pre", "suspend", "damaged")
        h.conn.execute("UPDATE events SET time = 'x' WHERE note = 'damaged'")
        h.conn.commit()
        assert [(e.note, type(e.time)) for e in h.events(1)] == [("first", float)]
        pre = h.last_event("pre", "suspend")
        assert pre is not None and (pre.note, type(pre.time)) == ("first", float)
        assert h.last_event("post") is None


# Run in a mount namespace of its own: a 4 MiB tmpfs on the state folder, a guard killed after
# its stop, the disk then filled, and the history opened as restore opens it.
FULL = """
import json, os, subprocess, sys, time
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History
state, reserve = sys.argv[1], sys.argv[2] == "reserve"
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", state], check=True)
h = History.open(state)
a = h.begin("suspend", "unit", False, "digest")
h.stop_issued(h.stopping(a, [Stop(Owner("systemd-service", "train.service"), seq=0,
                                  stopped=time.time())]), [])
h.conn.execute("UPDATE attempts SET guard_pid = 0")
h.conn.commit()
if not reserve:
    os.unlink(os.path.join(state, "history.reserve"))
try:
    with open(os.path.join(state, "checkpoint"), "wb") as out:
        while True:
            out.write(b"x" * 65536)
            out.flush()
except OSError:
    pass
try:
    with History.open(state) as h:
        out = {"warnings": h.warnings, "pending": [s.owner.key for s in h.pending_stops()],
               "verdict": h.conn.execute("SELECT verdict FROM attempts").fetchone()[0],
               "reserve": os.path.exists(os.path.join(state, "history.reserve"))}
except Exception as exc:
    out = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(out))
"""


def open_full(tmp_path: Path, reserve: bool) -> dict[str, object]:
    state = tmp_path / "state"
    state.mkdir()
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                           "-c", FULL, str(state), "reserve" if reserve else "none"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


@needs_root
@pytest.mark.parametrize("reserve", [True, False])
def test_a_full_disk_still_opens_leaving_the_mark_and_the_verdicts_room(
        tmp_path: Path, reserve: bool) -> None:
    """Restore reads the stops it acts on; the room kept stays the next verdict's."""
    result = open_full(tmp_path, reserve=reserve)
    assert result["pending"] == ["systemd-service:train.service"], result
    assert result["verdict"] is None
    path = tmp_path / "state" / "history.db"
    assert result["warnings"] == [
        f"cannot write {path}: database or disk is full: an attempt whose guard was killed is "
        "not marked interrupted yet (the next open marks it)"]
    assert result["reserve"] is reserve
