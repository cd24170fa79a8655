"""One history written by two processes at once: the veto unit's connection, open for its
whole run, beside a sleep hook's or a shell's that opens, writes and closes.

SQLite keeps its locks as POSIX locks of the process; closing any descriptor of the
file in that process drops them all, and the next process to open the database then
takes itself for its only user.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from suspendguard.store.history import DB_NAME, History

# The veto unit's run: its connection stays open, and writes, while the others write.
LONG_RUN = """
import sys, time
from suspendguard.store.history import History
h = History.open(sys.argv[1])
attempt = h.begin("suspend", "unit", False, "look")
print("open", flush=True)
for n in range(60):
    h.record_event("guard", "suspend", f"round {n}", attempt)
    time.sleep(0.02)
h.close()
"""


def test_a_connection_open_beside_others_keeps_their_rows(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    run = subprocess.Popen([sys.executable, "-c", LONG_RUN, str(state)], text=True,
                           stdout=subprocess.PIPE)
    try:
        assert run.stdout is not None and run.stdout.readline() == "open\n"
        for n in range(10):  # the hook's steps, each its own open, while the run writes
            with History.open(str(state)) as history:
                history.record_event("hook", "suspend", f"step {n}")
            time.sleep(0.05)
        assert run.wait(timeout=60) == 0
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    with sqlite3.connect(state / DB_NAME) as db:
        rows = db.execute("SELECT phase, note FROM events").fetchall()
    assert sorted(rows) == sorted([*(("hook", f"step {n}") for n in range(10)),
                                   *(("guard", f"round {n}") for n in range(60))])
