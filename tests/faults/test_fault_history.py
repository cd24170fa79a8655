"""Issue 15 items 5, 6, 7: the history is root's alone, damage never costs a verdict, no symlinks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from guard.test_transient_user_unit import OneOwner
from helpers.holders import Holders
from helpers.isolation import needs_root
from helpers.records import ended
from helpers.users import nobody_prefix

from suspendguard.errors import HistoryError
from suspendguard.guard.pipeline import run
from suspendguard.model import Holder, Owner
from suspendguard.record import Stop
from suspendguard.store import database
from suspendguard.store.history import History, last_attempt_start
from suspendguard.system.deadline import Deadline
from suspendguard.system.log import Logger

from .helpers import cli, one_line, open_dir


def guard(config: Any, **kw: Any) -> Any:
    return run(config, dry_run=False, action="suspend", origin="unit", idle_check=None,
               log=Logger(io.StringIO(), {}), history=History.open, **kw)


def history_conf(tmp_path: Path, state: Path) -> Path:
    conf = tmp_path / "h.toml"
    conf.write_text(f'[state]\ndir = "{state}"\n')
    return conf


# -- item 5: not world-readable, so nobody can lock it ------------------------

LOCKER = """
import sqlite3, sys, time
try:
    conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM attempts").fetchone()
except Exception as exc:
    print("denied", exc, flush=True)
    sys.exit(0)
print("locked", flush=True)
time.sleep(30)
"""


@needs_root
def test_nobody_cannot_read_or_lock_the_history(make_config: Any) -> None:
    prefix = nobody_prefix()
    if prefix is None:
        pytest.skip("no setpriv or runuser to drop to nobody")
    with open_dir() as top:
        state = top / "state"
        state.mkdir(mode=0o755)  # as an older version left it
        cfg = make_config(state={"dir": str(state)})
        assert guard(cfg).history == "recorded"
        db = state / "history.db"
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        for f in state.iterdir():
            assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        locker = subprocess.Popen([*prefix, "/usr/bin/python3", "-c", LOCKER, str(db)],
                                  stdout=subprocess.PIPE, text=True, cwd="/")
        try:
            assert locker.stdout is not None
            assert locker.stdout.readline().startswith("denied")
            assert guard(cfg).history == "recorded"
        finally:
            locker.kill()
            locker.wait()


# -- item 6: damage -----------------------------------------------------------

def filled(cfg: Any, n: int = 30) -> Path:
    for _ in range(n):
        guard(cfg)
    return Path(cfg.state.dir) / "history.db"


def test_damaged_pages_are_one_line(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config()
    db = filled(cfg)
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    page = 4096
    for i in range(page, len(data), 2 * page):  # every other page after the header's
        data[i:i + page] = os.urandom(min(page, len(data) - i))
    db.write_bytes(bytes(data))
    conf = history_conf(tmp_path, Path(cfg.state.dir))
    for argv in (["history"], ["history", "--json"]):
        status, _, err = cli(*argv, "--config", str(conf))
        assert status in (0, 3) and "Traceback" not in err
        if status == 3:
            assert one_line(err) and "cannot read" in err


def test_row_with_invalid_json_is_skipped_and_said(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config()
    db = filled(cfg, 3)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE attempts SET reasons = '{not json' WHERE id = 2")
    conf = history_conf(tmp_path, Path(cfg.state.dir))
    status, out, err = cli("history", "--config", str(conf))
    assert status == 0 and one_line(err) and "attempt 2: damaged row skipped" in err
    ids = [line.split()[0] for line in out.splitlines()[1:]]
    assert ids == ["3", "1"]


def test_a_damaged_drain_time_is_no_earlier_time(make_config: Any, node: str,
                                                 holders: Holders) -> None:
    """Text in a holder's seconds: check and the drain's own reasons read the job's earlier
    drains without it, never a traceback."""
    cfg = make_config()
    holders.start(node)
    [first] = guard(cfg).holders  # one real drain of the job: its time is kept
    with sqlite3.connect(Path(cfg.state.dir) / "history.db") as c:
        c.execute("INSERT INTO holders SELECT * FROM holders")
        c.execute("UPDATE holders SET seconds = 'n/a' WHERE rowid = (SELECT MAX(rowid) "
                  "FROM holders)")
    _, pid = holders.start(node)
    with History.open(cfg.state.dir, readonly=True) as h:
        times = h.drain_times(first.decision.holder)
    assert len(times) == 1 and 0 <= times[0] < 5, times
    report = run(cfg, dry_run=True, action="suspend", origin="test", idle_check=None,
                 log=Logger(io.StringIO(), {}), history=History.open)
    assert [h.decision.holder.pid for h in report.holders] == [pid]


@pytest.mark.parametrize(("column", "table", "value"), [
    ("started", "attempts", "yesterday"), ("finished", "attempts", "yesterday"),
    ("time", "events", "soon"),
    # A number no time can show: a traceback from the date's formatting before.
    ("started", "attempts", 1e300), ("finished", "attempts", -1e18), ("time", "events", 1e300),
])
def test_row_with_no_time_for_a_time_is_skipped_and_said(
        make_config: Any, tmp_path: Path, column: str, table: str, value: str | float) -> None:
    # SQLite keeps text written to a REAL column: a damaged row, not a TypeError traceback.
    cfg = make_config()
    db = filled(cfg, 3)
    with sqlite3.connect(db) as c:
        if table == "events":
            c.execute("INSERT INTO events (attempt_id, time, phase) VALUES (2, ?, 'post')",
                      (value,))
        else:
            c.execute(f"UPDATE attempts SET {column} = ? WHERE id = 2", (value,))
    conf = history_conf(tmp_path, Path(cfg.state.dir))
    for argv in (["history"], ["history", "--json"], ["status"]):
        status, out, err = cli(*argv, "--config", str(conf))
        assert status == 0 and "Traceback" not in err, argv
        if argv[0] == "history":
            assert one_line(err) and "attempt 2: damaged row skipped" in err
        else:  # the skipped row is named, so that attempt 1 is not taken for the last
            assert "  ! attempt 2: damaged row skipped" in out, out
    status, out, _ = cli("history", "--config", str(conf))
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["3", "1"]


def test_an_attempt_recorded_but_damaged_is_unreadable_not_unknown(make_config: Any,
                                                                    tmp_path: Path) -> None:
    cfg = make_config()
    filled(cfg, 1)
    with sqlite3.connect(Path(cfg.state.dir) / "history.db") as c:
        c.execute("INSERT INTO events (attempt_id, time, phase) VALUES (1, 'noon', 'post')")
    conf = history_conf(tmp_path, Path(cfg.state.dir))
    status, _, err = cli("history", "1", "--config", str(conf))
    assert status == 3 and one_line(err), err
    assert "attempt 1: damaged row skipped (event time is 'noon'" in err
    status, out, err = cli("history", "--config", str(conf))
    assert status == 0 and one_line(err) and "attempt 1: damaged row skipped" in err
    assert out == "history: no attempt could be read (1 damaged, named above)\n"


def test_a_damaged_newest_attempt_hides_none_before_it(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config()
    db = filled(cfg, 3)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE attempts SET reason_details = 'garbage' WHERE id = 3")
        started = c.execute("SELECT started FROM attempts WHERE id = 2").fetchone()[0]
    with History.open(cfg.state.dir, readonly=True) as h:
        last = h.last_real_attempt()
        assert last is not None and last.id == 2, last
        assert [n.split(":")[0] for n in h.notes] == ["attempt 3"]
    assert last_attempt_start(cfg.state.dir) == datetime.fromtimestamp(started)
    conf = history_conf(tmp_path, Path(cfg.state.dir))
    status, _, err = cli("logs", "--since", "last-attempt", "--config", str(conf))
    assert status == 0 and "no recorded attempt" not in err, err


@pytest.mark.parametrize("column", ["stopped", "restored", "issued"])
def test_a_stop_row_with_text_for_a_time_is_shown_and_said(tmp_path: Path, no_bus: str,
                                                           column: str) -> None:
    # The row names a job that may still be down: it is kept (its time unknown), never a
    # TypeError traceback from history --json or status, and never hidden from restore.
    state = tmp_path / "state"
    with History.open(str(state)) as h:
        first = h.begin("suspend", "unit", False, "digest", 1_700_000_000.0)
        h.finish(ended(first, "allow", finished=1_700_000_001.0,
                       stops=[Stop(Owner("systemd-service", "infer.service"), 1, 1_700_000_000.5)]))
    with sqlite3.connect(state / "history.db") as c:
        c.execute(f"UPDATE stops SET {column} = 'yesterday'")
    conf = history_conf(tmp_path, state)
    for argv in (["history"], ["history", "--json"], ["status"], ["status", "--json"]):
        status, out, err = cli(*argv, "--config", str(conf))
        assert status == 0 and "Traceback" not in err, (argv, err)
        if argv == ["history"]:
            assert one_line(err) and f"{column} is 'yesterday', not a number" in err
        if argv == ["history", "--json"]:
            [row] = json.loads(out)["attempts"][0]["stopped"]
            assert row["owner"] == "systemd-service:infer.service"
            assert row["result"] == "pending" and row["restored"] is None
            if column == "stopped":
                assert row["stopped"] is None
        if argv == ["status", "--json"]:
            [row] = json.loads(out)["history"]["not_restored"]
            assert row["name"] == "infer.service"
        if argv == ["status"]:
            assert "systemd-service:infer.service" in out
    status, out, err = cli("restore", "--json", "--config", str(conf))
    assert status == 3 and "Traceback" not in err  # no system bus here: failed, and said
    [done] = json.loads(out)["restored"]
    assert done["name"] == "infer.service" and done["result"] == "failed"
    assert f"{column} is 'yesterday', not a number: read as unknown" in err


def test_three_guards_on_a_corrupt_database_keep_the_original(make_config: Any) -> None:
    cfg = make_config()
    state = Path(cfg.state.dir)
    state.mkdir(mode=0o700)
    original = b"not a database, but the only copy of thirty rows " * 100
    # Opening is one run at a time (a flock on the folder): each guard opens
    # a working database, exactly one moves the original aside, and the
    # original survives: a run that had opened it before it was moved would
    # otherwise take the new file's -wal for its own and checkpoint into it.
    script = ("import sys, time\n"
              "from suspendguard.errors import HistoryError\n"
              "from suspendguard.store.history import History\n"
              "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
              "try:\n    History.open(sys.argv[1]).close()\n"
              "except HistoryError as exc:\n    print(exc)\n")
    for _ in range(8):
        for f in state.iterdir():
            f.unlink()
        (state / "history.db").write_bytes(original)
        at = str(time.time() + 0.5)
        runs = [subprocess.Popen([sys.executable, "-c", script, str(state), at],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(3)]
        outs = [p.communicate(timeout=60) for p in runs]
        assert [p.returncode for p in runs] == [0, 0, 0], outs
        assert [out for out, _ in outs] == ["", "", ""]
        asides = [f for f in state.glob("history.db.corrupt-*") if not f.name.endswith(("wal", "shm"))]
        assert [f.read_bytes() for f in asides] == [original]


def test_aside_names_are_unique_within_a_second(tmp_path: Path) -> None:
    names = set()
    for _ in range(3):
        db = tmp_path / "history.db"
        db.write_bytes(b"junk")
        names.add(database._move_aside(str(db), db.stat().st_ino))
    assert len(names) == 3


@needs_root
def test_immutable_corrupt_database_still_gives_a_verdict(make_config: Any) -> None:
    cfg = make_config()
    state = Path(cfg.state.dir)
    state.mkdir(mode=0o700)
    db = state / "history.db"
    db.write_bytes(b"junk" * 1000)
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here")
    try:
        report = guard(cfg)
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert report.verdict.kind == "allow"
    assert report.to_json()["history"].startswith("not recorded: ")
    assert any("history not recorded" in w for w in report.verdict.warnings)


LOCK_HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(30)
"""


@contextlib.contextmanager
def locked(db: Path) -> Iterator[None]:
    """Another process in an exclusive transaction on ``db`` while the block runs."""
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(db)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_lock_wait_is_bounded_by_the_deadline(make_config: Any) -> None:
    cfg = make_config()
    with locked(filled(cfg, 1)):
        started = time.monotonic()
        with pytest.raises(HistoryError, match="locked"), \
                History.open(cfg.state.dir, deadline=Deadline(started + 1.0)) as h:
            h.begin("suspend", "unit", False, "digest")
        assert time.monotonic() - started < 1.8


def test_guard_verdict_in_time_with_a_locked_history(make_config: Any) -> None:
    cfg = make_config(drain={"timeout_s": 1, "deadline_s": 3})
    with locked(filled(cfg, 1)):
        started = time.monotonic()
        report = guard(cfg)
        assert report.verdict.kind == "allow"
        assert time.monotonic() - started < 3.0


class ServiceOwner(OneOwner):
    """Every holder runs in train.service (Restart=always); stops are recorded."""

    def owner(self, holder: Holder) -> Owner:
        return Owner("systemd-service", "train.service", restart="always", activity="active")


def test_no_job_is_kept_down_that_the_history_could_not_write_down(
        make_config: Any, node: str, holders: Holders) -> None:
    """A stop restore cannot read is a job left down after resume, with nothing to say so:
    with the history locked past the guard's wait, the supervisor is not asked at all, and
    the job gets its SIGINT directly."""
    cfg = make_config(drain={"timeout_s": 2, "deadline_s": 8})
    db = filled(cfg, 1)
    _, pid = holders.start(node)
    control = ServiceOwner()
    with locked(db):
        report = guard(cfg, supervisors=control)
    assert control.kept == []
    assert holders.signals() == [f"{pid} SIGINT"]
    assert any(w.startswith("train.service: not kept from restarting through systemd: the "
                            "history could not be written (") and "restore could not start it "
               "again" in w for w in report.verdict.warnings), report.verdict.warnings


# -- item 7: symlinks and the state folder --------------------------------------

@needs_root
def test_planted_database_symlink_changes_no_other_file(make_config: Any,
                                                        tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    secret.chmod(0o600)
    cfg = make_config()
    state = Path(cfg.state.dir)
    state.mkdir(mode=0o700)
    (state / "history.db").symlink_to(secret)
    report = guard(cfg)
    assert report.verdict.kind == "allow"
    assert "symlink" in report.to_json()["history"]
    assert secret.read_text() == "root:secret\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_state_dir_symlink_is_not_followed(make_config: Any, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "state-link"
    link.symlink_to(elsewhere)
    report = guard(make_config(state={"dir": str(link)}))
    assert report.verdict.kind == "allow" and "symlink" in report.to_json()["history"]
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("folder", ["/etc", "/etc/", "/var/lib", "/", "/tmp"])
def test_system_folder_as_state_dir_is_refused(tmp_path: Path, folder: str) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[state]\ndir = "{folder}"\n')
    status, _, err = cli("config", "--config", str(conf))
    assert status == 2 and one_line(err) and "[state] dir" in err and "system folder" in err


@needs_root
def test_state_dir_of_another_user_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 65534, 65534)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[state]\ndir = "{state}"\n[idle]\nbackends = []\n[devices]\nfamilies = []\n')
    status, _, err = cli("check", "--config", str(conf))
    assert status == 4 and one_line(err) and "[state] dir" in err and "not root" in err
