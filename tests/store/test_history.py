"""History: rows per attempt and holder, kill -9 mid-attempt, corruption, read-only dirs."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers.holders import Holders
from helpers.records import ended
from helpers.runners import guard

from suspendguard.cli import main
from suspendguard.errors import HistoryError, NoHistory
from suspendguard.model import PLAIN, Outcome, Owner
from suspendguard.record import DeviceHealth, KeptRecord, Stop
from suspendguard.store.history import History, last_attempt_start


def test_attempt_and_holder_rows(make_config: Any, node: str, holders: Holders,
                                 tmp_path: Path) -> None:
    _, pid = holders.start(node)
    cfg = make_config()
    report = guard(cfg, action="hibernate", origin="unit")
    with History.open(cfg.state.dir, readonly=True) as h:
        [attempt] = h.attempts(5)
    assert attempt.id == report.attempt.id
    assert attempt.result == "allow" and attempt.action == "hibernate"
    assert attempt.origin == "unit" and not attempt.dry_run
    assert attempt.config_digest == History.digest(cfg) and attempt.finished is not None
    [row] = attempt.holders
    assert row.holder.pid == pid and row.outcome.kind == "exited"
    assert isinstance(row, KeptRecord) and row.action == "drain"
    assert row.outcome.seconds is not None and row.outcome.seconds > 0
    assert last_attempt_start(cfg.state.dir) is not None
    # One holder schema: what the history shows is what the run showed, less the scan's detail.
    [ran] = report.holders
    shown, kept = ran.to_json(), row.to_json()
    assert kept == {k: shown[k] for k in kept}
    # What only a live scan knows (docs/json-and-metrics.md); uid and exe are kept, not shown.
    assert set(shown) - set(kept) == {"ppid", "exe", "cmdline", "uid", "container", "owner",
                                      "nspid", "nodes", "sigint", "frozen", "notes", "respawned"}
    assert (row.holder.uid, row.holder.exe) == (ran.holder.uid, ran.holder.exe)


@pytest.mark.parametrize("owner", [PLAIN, Owner("systemd-service", "train.service"),
                                   Owner("user-service", "job.service", uid=1000),
                                   Owner("docker", "ab" * 32), Owner("kubernetes", "uid-1")])
def test_an_owner_reads_back_from_its_key(owner: Owner) -> None:
    back = Owner.from_key(owner.key)
    assert (back.kind, back.name, back.uid, back.key) == (owner.kind, owner.name, owner.uid,
                                                         owner.key)


def test_veto_reasons_are_recorded(make_config: Any, node: str, holders: Holders) -> None:
    _, pid = holders.start(node, mode="deaf")
    cfg = make_config()
    guard(cfg, action="hibernate", origin="unit")
    with History.open(cfg.state.dir, readonly=True) as h:
        [attempt] = h.attempts(5)
    assert attempt.result == "veto"
    assert any(f"pid {pid}" in r for r in attempt.reasons)


def test_kill_9_mid_attempt_is_interrupted_next_time(make_config: Any, node: str,
                                                     holders: Holders, tmp_path: Path) -> None:
    holders.start(node, mode="slow")
    cfg = make_config(drain={"timeout_s": 60})
    conf = tmp_path / "c.toml"
    conf.write_text(f'[devices]\nfamilies = []\nnodes = ["{node}"]\n[state]\ndir = "{cfg.state.dir}"\n'
                    '[idle]\nbackends = []\n[drain]\ntimeout_s = 60\n')
    guard_proc = subprocess.Popen([sys.executable, "-m", "suspendguard", "--config", str(conf),
                                   "pre-sleep", "suspend"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            time.sleep(0.1)
            with contextlib.suppress(NoHistory), History.open(cfg.state.dir, readonly=True) as h:
                if h.attempts(1) and h.attempts(1)[0].result == "running":
                    break
        else:
            raise AssertionError("the guard never began an attempt")
    finally:
        guard_proc.send_signal(signal.SIGKILL)
        guard_proc.wait()
    with History.open(cfg.state.dir) as h:
        [attempt] = h.attempts(5)
        assert attempt.result == "interrupted"
        row = h.conn.execute("SELECT verdict FROM attempts").fetchone()
        assert row[0] == "interrupted"


def test_corrupt_database_is_moved_aside(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config()
    state = Path(cfg.state.dir)
    state.mkdir(parents=True)
    (state / "history.db").write_bytes(b"this is not a database" * 100)
    report = guard(cfg, action="hibernate", origin="unit")
    assert report.verdict.kind == "allow"
    assert any("moved to" in w for w in report.verdict.warnings)
    assert list(state.glob("history.db.corrupt-*"))
    with History.open(cfg.state.dir, readonly=True) as h:
        assert len(h.attempts()) == 1


def test_unwritable_state_dir_keeps_the_verdict(make_config: Any, node: str, holders: Holders,
                                                tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    _, _pid = holders.start(node)
    cfg = make_config(state={"dir": str(blocker / "state")})
    report = guard(cfg, action="hibernate", origin="unit")
    assert report.verdict.kind == "allow"
    assert any("history not recorded" in w for w in report.verdict.warnings)


def test_history_command_newest_first(make_config: Any, tmp_path: Path) -> None:
    cfg = make_config()
    for _ in range(3):
        guard(cfg, action="hibernate", origin="unit")
    conf = tmp_path / "c.toml"
    conf.write_text(f'[state]\ndir = "{cfg.state.dir}"\n')
    out = io.StringIO()
    assert main(["history", "-n", "2", "--json", "--config", str(conf)], out=out,
                err=io.StringIO(), environ={}) == 0
    ids = [a["id"] for a in json.loads(out.getvalue())["attempts"]]
    assert ids == [3, 2]
    out = io.StringIO()
    assert main(["history", "--config", str(conf)], out=out, err=io.StringIO(), environ={}) == 0
    assert out.getvalue().splitlines()[0].split()[:4] == ["ID", "STARTED", "ACTION", "VERDICT"]


def test_history_without_state_is_an_answer(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[state]\ndir = "{tmp_path / "none"}"\n')
    out = io.StringIO()
    assert main(["history", "--config", str(conf)], out=out, err=io.StringIO(), environ={}) == 0
    assert "no history yet" in out.getvalue()


def test_schema_is_wal(make_config: Any) -> None:
    cfg = make_config()
    guard(cfg, action="hibernate", origin="unit")
    conn = sqlite3.connect(Path(cfg.state.dir) / "history.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_database_without_its_tables_yet_is_no_history(tmp_path: Path) -> None:
    # A reader between the first guard's creating the file and its tables.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    sqlite3.connect(state / "history.db").close()
    (state / "history.db").chmod(0o600)
    with pytest.raises(NoHistory, match="no history yet"):
        History.open(str(state), readonly=True)


def test_a_health_answer_reads_back_as_the_same_record_stamped(tmp_path: Path) -> None:
    """The check's answer is the history's record: stamped with its time and attempt, less
    what the history does not keep (the check that said so, the failure's signature)."""
    answer = DeviceHealth("gpu 0", "nvidia", "unhealthy", "cuInit: 999", "cuda", "cuda-999")
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.record_health(attempt, [answer])
        [back] = h.last_health()
    assert back == replace(answer, source="", signature="", time=back.time, attempt_id=attempt)
    assert back.time > 0
    assert set(back.to_json()) == set(answer.to_json())
    assert back.to_json()["attempt"] == attempt and answer.to_json()["time"] is None


def test_finish_writes_the_stops_not_written_ahead_once(tmp_path: Path) -> None:
    ahead = Stop(Owner("systemd-service", "train.service"), 0, 1_700_000_000.5)
    late = Stop(Owner("docker", "c0ffee"), 1, 1_700_000_000.7)  # its row failed before the stop
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest", 1_700_000_000.0)
        [row] = h.stopping(attempt, [ahead])
        h.stop_issued([row], [])
        h.finish(ended(attempt, "allow", finished=1_700_000_001.0, stops=[ahead, late]))
        stops = h.pending_stops(attempt)
        [done] = h.attempts(1)
    assert [(s.seq, s.owner.key) for s in stops] == [(0, "systemd-service:train.service"),
                                                     (1, "docker:c0ffee")]
    assert stops[0].id == row and stops[1].issued is not None
    assert (done.result, done.finished) == ("allow", 1_700_000_001.0)


def test_the_last_attempt_a_sleep_followed_is_a_real_one_or_the_units_look_in_observe_mode(
        tmp_path: Path) -> None:
    with History.open(str(tmp_path)) as h:
        real = h.begin("suspend", "unit", False, "digest", 1_700_000_000.0)
        h.begin("suspend", "cli", True, "digest", 1_700_000_100.0)  # check from a shell
        assert h.last_slept_on().id == real
        look = h.begin("suspend", "unit", True, "digest", 1_700_000_200.0)  # observe mode
        h.begin("suspend", "cli", True, "digest", 1_700_000_300.0)
        assert h.last_slept_on().id == look
        assert h.last_slept_on(action="hibernate") is None
        assert h.last_real_attempt().id == real
    assert last_attempt_start(str(tmp_path)) == datetime.fromtimestamp(1_700_000_200.0)


def test_health_answers_from_a_history_older_than_them(tmp_path: Path) -> None:
    """A file written before the health checks were recorded has no table for them: read-only
    it has no answer (the attempts still read), and the next writable open adds the table."""
    with History.open(str(tmp_path)) as h:
        h.begin("suspend", "unit", False, "digest")
    with sqlite3.connect(tmp_path / "history.db") as c:
        c.execute("DROP TABLE health")
    with History.open(str(tmp_path), readonly=True) as h:
        assert h.last_health() == []
        assert [a.action for a in h.attempts(5)] == ["suspend"]
    with History.open(str(tmp_path)) as h:
        h.record_health(None, [DeviceHealth("npu 0", "ascend", "healthy", "")])
        assert [d.device for d in h.last_health()] == ["npu 0"]


def test_health_words_from_a_history_older_than_them(tmp_path: Path) -> None:
    """A file written before the health words were kept has no table for them: read-only it
    has no word (not an error), and the next writable open adds the table."""
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
    with sqlite3.connect(tmp_path / "history.db") as c:
        c.execute("DROP TABLE health_before")
    with History.open(str(tmp_path), readonly=True) as h:
        assert h.health_before(attempt) == {}
    with History.open(str(tmp_path)) as h:
        assert h.health_before(attempt) == {}
        h.record_health_before(attempt, [("npu 0", "ascend", "Alarm")])
        assert h.health_before(attempt) == {"npu 0": "Alarm"}


def kept_with_log_dirs(folder: Path) -> tuple[int, KeptRecord]:
    """An attempt written with one holder that named two log folders: its id and the holder."""
    record = KeptRecord.of(pid=42, start_time=7, user="root", unit=None, comm="python3",
                           command="python3 train.py", action="drain", rule="",
                           outcome=Outcome("exited", 1.0))
    record = replace(record, holder=replace(record.holder, uid=0,
                                            log_dirs=("/data/job/plog", "/data/job/log")))
    with History.open(str(folder)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.signalling(attempt, [record])
    return attempt, record


def test_a_holder_s_log_folders_read_back(tmp_path: Path) -> None:
    attempt, record = kept_with_log_dirs(tmp_path)
    with History.open(str(tmp_path), readonly=True) as h:
        [row] = h.attempt(attempt).holders
    assert row.holder.log_dirs == ("/data/job/plog", "/data/job/log") and row == record


def test_a_history_from_before_log_folders_reads_none(tmp_path: Path) -> None:
    """A file written before the holders' log folders were kept lacks the column: its holders
    read back with none (read-only, nothing added), and a damaged cell reads as none too."""
    attempt, _ = kept_with_log_dirs(tmp_path)
    with sqlite3.connect(tmp_path / "history.db") as c:
        c.execute("ALTER TABLE holders DROP COLUMN log_dirs")
    with History.open(str(tmp_path), readonly=True) as h:
        [row] = h.attempt(attempt).holders
    assert (row.holder.pid, row.holder.uid, row.holder.log_dirs) == (42, 0, ())
    with History.open(str(tmp_path)) as h:  # a writable open adds the column
        [row] = h.attempt(attempt).holders
        assert row.holder.log_dirs == ()
    for damaged in ("not json", '{"a": 1}', "[1, null]", 7):
        with sqlite3.connect(tmp_path / "history.db") as c:
            c.execute("UPDATE holders SET log_dirs = ?", (damaged,))
        with History.open(str(tmp_path), readonly=True) as h:
            [row] = h.attempt(attempt).holders
        assert row.holder.pid == 42 and row.holder.log_dirs == (), damaged


@pytest.mark.parametrize("name", ["st#1", "st?mode=rw", "st%41", "st;a b"])
def test_a_state_folder_named_with_uri_characters_is_read_where_it_was_written(
        make_config: Any, tmp_path: Path, name: str) -> None:
    cfg = make_config(state={"dir": str(tmp_path / name)})
    report = guard(cfg, action="suspend", origin="unit")
    with History.open(cfg.state.dir, readonly=True) as h:
        assert [a.id for a in h.attempts(5)] == [report.attempt.id]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("st")) == [name]


def test_a_job_whose_executable_path_is_no_utf8_is_drained_and_kept(
        make_config: Any, node: str, holders: Holders, tmp_path: Path) -> None:
    # Run from a folder named in Latin-1: the path /proc gives holds bytes that are no
    # UTF-8, which SQLite refused, a traceback in every run while the job held the device.
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/\xe9t\xe9"))
    folder.mkdir()
    python = folder / "python3"
    shutil.copy2(os.path.realpath(sys.executable), python)
    _, pid = holders.start(node, python=str(python))
    cfg = make_config()
    report = guard(cfg)
    assert report.verdict.kind == "allow", report.verdict.texts
    [ran] = report.holders
    assert ran.holder.pid == pid and ran.holder.exe == str(python)
    assert holders.signals() == [f"{pid} SIGINT"]  # the job's own word: it had its SIGINT
    with History.open(cfg.state.dir, readonly=True) as h:
        [row] = h.attempts(1)[0].holders
    assert row.outcome.kind == "exited"
    assert row.holder.exe == str(python).encode("utf-8", "backslashreplace").decode()
    # The next look asks the history for the job's drain times by its path, escaped alike.
    _, again = holders.start(node, python=str(python))
    [seen] = guard(cfg, dry_run=True).holders
    assert seen.holder.pid == again and seen.outcome.kind == "would-signal"
    assert "to exit after its signal the last time" in seen.outcome.why, seen.outcome.why


class LockedStops:
    """A connection whose reads of the stops table fail as a locked or failing file does."""

    def __init__(self, conn: sqlite3.Connection, error: str) -> None:
        self.conn, self.error = conn, error

    def execute(self, sql: str, *args: Any) -> Any:
        if "FROM stops" in sql:
            raise sqlite3.OperationalError(self.error)
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


@pytest.mark.parametrize("error", ["database is locked", "disk I/O error"])
def test_stops_that_cannot_be_read_are_an_error_never_none(tmp_path: Path, error: str) -> None:
    """No pending stops is restore's "nothing to restore", and after a veto no job started
    again: a read that failed must say so."""
    now = time.time()
    with History.open(str(tmp_path)) as h:
        attempt = h.begin("suspend", "unit", False, "digest", now - 5)
        h.finish(ended(attempt, "veto", finished=now - 4,
                       stops=[Stop(Owner("systemd-service", "train.service"), 0, now - 4.5)]))
    with History.open(str(tmp_path), readonly=True) as h:
        assert [s.owner.name for s in h.pending_stops()] == ["train.service"]
        h.conn = LockedStops(h.conn, error)  # type: ignore[assignment]
        with pytest.raises(HistoryError, match=error):
            h.pending_stops()
        with pytest.raises(HistoryError, match=error):
            h.not_restored()
