"""``suspendguard restore`` after the history was found damaged: SQLite's check fails on one
page, the history is moved aside and a new one started, and its stops go with it. Restore
cannot start them, and says so (one line naming the jobs) with exit 3, never a silent
"nothing to restore" and 0."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
from pathlib import Path

import pytest
from helpers.runners import cli

from suspendguard.commands import restore
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History
from suspendguard.supervise.managers import ManagersAndEngines


def test_a_history_moved_aside_is_said_with_the_jobs_it_leaves_down_and_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_bus: str) -> None:
    monkeypatch.setattr(restore, "ManagersAndEngines",
                        functools.partial(ManagersAndEngines, dropin_root=str(tmp_path / "run")))
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{state}"\n'
                      '[idle]\nbackends = []\n[resume]\nhealth_check = false\n')
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.stop_issued(h.stopping(attempt, [Stop(Owner("systemd-service", "train.service"),
                                                seq=0, stopped=time.time())]), [])
    with contextlib.closing(sqlite3.connect(state / "history.db")) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        [root] = db.execute("SELECT rootpage FROM sqlite_master"
                            " WHERE name = 'findings_attempt'").fetchone()
        size = db.execute("PRAGMA page_size").fetchone()[0]
    with open(state / "history.db", "r+b") as f:  # an empty index's page: the stops readable
        f.seek((root - 1) * size)
        f.write(b"\x0d" + b"\xff" * 20)

    code, out, err = cli("--config", str(config), "restore", "--json")
    [aside] = state.glob("history.db.corrupt-*[0-9a-f]")
    [warning] = json.loads(out)["warnings"]
    assert f"moved to {aside}, started a new one" in warning
    assert warning.endswith("the jobs it recorded as stopped are not started again: "
                            "systemd-service:train.service")
    assert f"suspendguard: warning: {warning}\n" in err
    assert code == 3
