"""What the history takes for newer: a verdict committed while an open marks attempts
interrupted stands, and the last health check is the one written last, whatever the wall
clock stamped on it. Real SQLite files, a second connection for the other guard."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from suspendguard.record import DeviceHealth
from suspendguard.store.history import History
from suspendguard.system.procfs import ProcFS, Stat

GUARD = 4_000_000  # above pid_max: the pid of the other guard, as its attempt row names it


class EndsAsAsked(ProcFS):
    """The /proc an open reads whether an attempt's guard still runs: that guard commits its
    verdict (through its own connection) just as it is asked, and is gone."""

    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db

    def stat(self, pid: int, at: int | None = None) -> Stat | None:
        if pid != GUARD:
            return super().stat(pid, at)
        with contextlib.closing(sqlite3.connect(self.db)) as other, other:
            other.execute("UPDATE attempts SET verdict = 'allow', reasons = '[]' "
                          "WHERE guard_pid = ?", (GUARD,))
        return None


def test_a_verdict_committed_while_an_open_marks_the_killed_stands(tmp_path: Path) -> None:
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.conn.execute("UPDATE attempts SET guard_pid = ? WHERE id = ?", (GUARD, attempt))
        h.conn.commit()
    with History.open(str(tmp_path), proc=EndsAsAsked(tmp_path / "history.db")) as h:
        [back] = h.attempts(1)
    assert (back.id, back.result, back.reasons) == (attempt, "allow", ())


def test_a_guard_gone_without_a_verdict_is_still_marked_interrupted(tmp_path: Path) -> None:
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.conn.execute("UPDATE attempts SET guard_pid = 0 WHERE id = ?", (attempt,))
        h.conn.commit()
    with History.open(str(tmp_path)) as h:
        [back] = h.attempts(1)
    assert (back.id, back.result) == (attempt, "interrupted")


def test_the_last_health_check_is_the_one_written_last_though_stamped_earlier(
        tmp_path: Path) -> None:
    """The wall clock stepped back between two checks (an RTC read at resume, time synced
    after boot): the second check's stamp is the earlier one, and it is still the last."""
    before = [DeviceHealth("npu 0", "ascend", "unhealthy", "Alarm"),
              DeviceHealth("npu 1", "ascend", "healthy", "")]
    with History.open(str(tmp_path)) as h:
        h.record_health(None, before)
        h.record_health(None, [DeviceHealth("npu 0", "ascend", "healthy", "")])
        # The first check's two rows, then the second's, stamped 100 s before them.
        h.conn.execute("UPDATE health SET time = 1700000100.5 WHERE id IN (1, 2)")
        h.conn.execute("UPDATE health SET time = 1700000000.5 WHERE id = 3")
        h.conn.commit()
    with History.open(str(tmp_path), readonly=True) as h:
        last = h.last_health()
    assert [(d.device, d.state, d.time) for d in last] == [("npu 0", "healthy", 1700000000.5)]
