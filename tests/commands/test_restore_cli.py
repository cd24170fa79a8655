"""``suspendguard restore`` when the manager cannot be reloaded once the drain drop-ins went,
after a sleep that followed no attempt or a veto, when a hold cannot be recorded, and when
the job of a unit it would start still saves after the guard's signal.

The fake systemd1 (tests/fakes/dbus/) on a private bus starts the unit and
refuses the reload as systemd does when /run/systemd is full; the drop-ins
lie in the test's own folder, not /run/systemd/system. The check after
resume is a fake that answers what the test says and keeps what it was asked.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import dbus_daemon
from helpers.journal import entries, standing_in
from helpers.records import drained_unit, ended
from helpers.runners import cli

from suspendguard.commands import restore
from suspendguard.config import defaults
from suspendguard.errors import HistoryError
from suspendguard.guard.outcome import restore_at_once
from suspendguard.health.model import HealthReport
from suspendguard.health.resume import AfterResume
from suspendguard.model import Outcome, Owner
from suspendguard.record import DeviceHealth, KeptRecord, Stop
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME, MARKER_NAME
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.system.log import Logger
from suspendguard.system.procfs import ProcFS

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

UNIT = "train.service"
ALARM = DeviceHealth("npu 0 chip 0", "ascend", "unhealthy", "npu-smi health Alarm")


def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, health_check: bool = False) -> Path:
    """The config, the history in tmp_path/state, the drop-ins under tmp_path/run."""
    dropins = tmp_path / "run"
    monkeypatch.setattr(restore, "ManagersAndEngines",
                        functools.partial(ManagersAndEngines, dropin_root=str(dropins)))
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{tmp_path / "state"}"\n'
                      '[idle]\nbackends = []\n[resume]\n'
                      f'health_check = {str(health_check).lower()}\n')
    return config


def drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A resumed attempt that stopped UNIT through its drop-in, still in place; the config."""
    drained_unit(tmp_path, UNIT)
    return configured(tmp_path, monkeypatch)


class FakeCheck:
    """The check after resume: ``devices`` its answer, each call's arguments kept."""

    def __init__(self, *devices: DeviceHealth) -> None:
        self.report = HealthReport(devices)
        self.asked: list[dict[str, Any]] = []

    def __call__(self, config: Any, since: Any, findings: Any, *, step: Any,
                 before: Any = None, **_: Any) -> AfterResume:
        self.asked.append({"findings": tuple(findings), "before": before})
        step("health", self.report.summary())
        return AfterResume(self.report, self.report)


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    with standing_in(tmp_path, monkeypatch) as sock:
        yield sock


def slept_days_ago(state: Path, days: float) -> int:
    """An attempt that allowed, whose sleep was resumed and checked ``days`` ago, with the
    chip's word before it (OK); its id."""
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(attempt, "allow"))
        h.record_health_before(attempt, [(ALARM.device, "ascend", "OK")])
        for phase in ("pre", "post", "health"):
            h.record_event(phase, "suspend", phase, attempt)
    ago = days * 24 * 3600
    with contextlib.closing(sqlite3.connect(state / "history.db")) as db, db:
        db.execute("UPDATE attempts SET started = started - ?, finished = finished - ?",
                   (ago, ago))
        db.execute("UPDATE events SET time = time - ?", (ago,))
    return attempt


def test_a_reload_that_fails_is_a_warning_with_its_fix_and_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        fakes: Callable[..., Any]) -> None:
    config = drained(tmp_path, monkeypatch)
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "stop_jobs": {UNIT: []}, "reload_fails": True}, services=["systemd"])
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert not (tmp_path / "run" / f"{UNIT}.d" / DROPIN_NAME).exists()
    with History.open(str(tmp_path / "state"), readonly=True) as h:
        assert [s.result for s in h.attempts(1)[0].stops] == ["started"]
    [line] = [w for w in err.splitlines() if "not reloaded" in w]
    assert line.startswith("suspendguard: warning: ")
    assert "the system manager" in line and UNIT in line and "Restart=no" in line
    assert "not enough space" in line
    assert line.endswith("run systemctl daemon-reload")
    assert json.loads(out)["warnings"] == [line.removeprefix("suspendguard: warning: ")]
    assert code == 3


def test_a_history_that_cannot_be_written_starts_every_job_all_the_same(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any]) -> None:
    """The disk full at resume (a job's checkpoint filled it during the drain): every job is
    started, each result said since it cannot be recorded, and the exit status says so."""
    config = drained(tmp_path, monkeypatch)
    other = "infer.service"
    drained_unit(tmp_path, other)
    started = {u: tmp_path / f"started-{u}" for u in (UNIT, other)}
    fakes({"units": {u: {"LoadState": "loaded", "ActiveState": "inactive"} for u in started},
           "jobs": {u: [["touch", str(p)]] for u, p in started.items()},
           "stop_jobs": {u: [] for u in started}}, services=["systemd"])

    def full(*_: Any, **__: Any) -> None:
        raise HistoryError("cannot write history.db: database or disk is full")

    monkeypatch.setattr(History, "record_restore", full)
    monkeypatch.setattr(History, "record_event", full)
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert all(p.exists() for p in started.values()), err
    assert sorted(r["result"] for r in json.loads(out)["restored"]) == ["started", "started"]
    assert sum("not recorded: cannot write history.db: database or disk is full" in line
               for line in err.splitlines()) == 2, err
    assert code == 3



def test_a_sleep_with_the_guard_off_is_checked_with_no_attempt_and_no_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_bus: str) -> None:
    """Two days after a checked sleep, the host sleeps with the guard off (the hook's pre
    went down after no attempt): the check is no step of the old attempt, nor judged by
    its words."""
    config = configured(tmp_path, monkeypatch, health_check=True)
    state = tmp_path / "state"
    old = slept_days_ago(state, 2)
    with History.open(str(state)) as h:  # as the hook writes them for this sleep
        h.record_event("pre", "suspend", "nothing was drained")
        h.record_event("post", "suspend", "resumed; no attempt recorded before it")
    check = FakeCheck(DeviceHealth(ALARM.device, "ascend", "healthy"))
    monkeypatch.setattr(restore, "after_resume", check)
    code, out, err = cli("--config", str(config), "restore")
    assert (code, out) == (0, "nothing to restore\n"), err
    assert check.asked == [{"findings": (), "before": None}]
    with History.open(str(state), readonly=True) as h:
        assert [(e.phase, e.attempt_id) for e in h.events(1)] == [("health", None)]
        attempt = h.attempt(old)
        assert attempt is not None and [e.phase for e in attempt.events] == ["pre", "post",
                                                                             "health"]
        assert [(d.device, d.attempt_id) for d in h.last_health()] == [(ALARM.device, None)]


def restore_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
                 config: Path, check: FakeCheck) -> tuple[int, str, str, Path]:
    """``restore --json`` of UNIT, stopped and not started since, with ``check`` as the check
    after resume: its exit status, output, errors, and the file the unit's start makes."""
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "jobs": {UNIT: [["touch", str(started)]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    monkeypatch.setattr(restore, "after_resume", check)
    code, out, err = cli("--config", str(config), "restore", "--json")
    return code, out, err, started


def test_after_a_veto_nothing_is_checked_and_the_pending_stop_is_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        journal: socket.socket) -> None:
    """The resume unit runs after a veto too, the veto's own restore cut short: no device
    slept, so a chip at Alarm, its word before unknown to a veto, holds nothing."""
    config = configured(tmp_path, monkeypatch, health_check=True)
    state = tmp_path / "state"
    slept_days_ago(state, 2)
    vetoed = drained_unit(tmp_path, UNIT)
    with contextlib.closing(sqlite3.connect(state / "history.db")) as db, db:
        db.execute("UPDATE attempts SET verdict = 'veto' WHERE id = ?", (vetoed,))
    check = FakeCheck(ALARM)
    code, out, err, started = restore_unit(tmp_path, monkeypatch, fakes, config, check)
    assert code == 0 and started.exists(), err
    doc = json.loads(out)
    assert doc["held"] == [] and doc["health"] is None and check.asked == []
    assert f"no sleep followed attempt {vetoed} (veto): the devices are not checked" in err
    with History.open(str(state), readonly=True) as h:
        attempt = h.attempt(vetoed)
        assert attempt is not None and [s.result for s in attempt.stops] == ["started"]
        assert not [e for e in h.events() if e.phase == "health" and e.attempt_id == vetoed]
    assert not entries(journal)


def test_a_job_held_after_a_sleep_is_checked_again_after_a_later_veto(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        journal: socket.socket) -> None:
    """Held on an unhealthy device, then a suspend refused: the resume unit after that veto
    must not start the held job unchecked."""
    config = configured(tmp_path, monkeypatch, health_check=True)
    state = tmp_path / "state"
    drained_unit(tmp_path, UNIT)
    with contextlib.closing(sqlite3.connect(state / "history.db")) as db, db:
        db.execute("UPDATE stops SET result = 'held', why = 'unhealthy after resume'")
        db.execute("INSERT INTO attempts (started, finished, action, origin, dry_run, verdict,"
                   " guard_pid) VALUES (?, ?, 'suspend', 'unit', 0, 'veto', 1)",
                   (time.time(), time.time()))
    check = FakeCheck(ALARM)
    code, _out, err, started = restore_unit(tmp_path, monkeypatch, fakes, config, check)
    assert code == 1 and not started.exists(), err
    assert len(check.asked) == 1 and "the devices are not checked" not in err


def test_a_sleeps_jobs_are_checked_though_a_suspend_was_refused_before_the_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        journal: socket.socket) -> None:
    """Attempt A drained the job and the host slept; after the resume a second suspend was
    asked and refused before the resume unit ran: A's sleep is still to be checked."""
    config = configured(tmp_path, monkeypatch, health_check=True)
    state = tmp_path / "state"
    slept = drained_unit(tmp_path, UNIT)
    with History.open(str(state)) as h:
        h.record_event("pre", "suspend", "going down", slept)
        h.record_event("post", "suspend", "resumed", slept)
        refused = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(refused, "veto", ["pid 7 python3 ignores SIGINT"], code="sigint-ignored"))
    check = FakeCheck(ALARM)
    code, _out, err, started = restore_unit(tmp_path, monkeypatch, fakes, config, check)
    assert code == 1 and not started.exists(), err
    assert len(check.asked) == 1 and "the devices are not checked" not in err
    with History.open(str(state), readonly=True) as h:
        assert [e.attempt_id for e in h.events() if e.phase == "health"] == [slept]


def test_a_hold_that_cannot_be_recorded_is_still_announced_and_exits_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        journal: socket.socket) -> None:
    """The disk full at resume and a device unhealthy: the job stays stopped, the journal
    gets its "jobs held after resume" entry, and the exit status says held."""
    config = configured(tmp_path, monkeypatch, health_check=True)
    drained_unit(tmp_path, UNIT)
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "jobs": {UNIT: [["touch", str(started)]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    monkeypatch.setattr(restore, "after_resume", FakeCheck(ALARM))

    def full(*_: Any, **__: Any) -> None:
        raise HistoryError("cannot write history.db: database or disk is full")

    monkeypatch.setattr(History, "record_hold", full)
    code, out, err = cli("--config", str(config), "restore")
    reason = f"device {ALARM.describe()}"
    assert (code, out) == (1, f"1 jobs held after resume: {reason}\n"), err
    assert not started.exists()
    assert (f"history: {UNIT} held, not recorded: cannot write history.db: database or disk "
            "is full") in err
    [sent] = entries(journal)
    assert sent["MESSAGE_ID"] == restore.HELD_MESSAGE_ID
    assert (sent["SUSPENDGUARD_HELD"], sent["SUSPENDGUARD_REASON"]) == ("1", reason)


SERVICE = Owner("systemd-service", UNIT)


@pytest.fixture
def saving() -> Iterator[subprocess.Popen[bytes]]:
    """The unit's job, still saving after the guard's signal (its main process: the fake
    systemd reads the unit active while it runs, inactive once it is gone)."""
    job = subprocess.Popen(["sleep", "60"])
    try:
        yield job
    finally:
        job.kill()
        job.wait()


def _row(job: subprocess.Popen[bytes], kind: str, signalled: bool = True) -> KeptRecord:
    st = ProcFS().stat(job.pid)
    assert st is not None
    return KeptRecord.of(pid=job.pid, start_time=st.start_time, user="root", unit=UNIT,
                         comm="sleep", command="sleep 60", action="drain",
                         rule="holds a compute node",
                         outcome=Outcome(kind, 30.0, "still running", signalled),  # type: ignore[arg-type]
                         owner=SERVICE)


def _dropin(tmp_path: Path) -> None:
    folder = tmp_path / "run" / f"{UNIT}.d"
    folder.mkdir(parents=True)
    (folder / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    (folder / MARKER_NAME).write_text("")


def _unit(fakes: Callable[..., Any], tmp_path: Path, main: int) -> Path:
    """UNIT in the fake systemd, active while pid ``main`` runs; the file its start makes
    (one line a start)."""
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "active", "MainPID": main}},
           "jobs": {UNIT: [["sh", "-c", f"echo >> {started}"]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    return started


def _pending(state: Path, config: Path) -> tuple[list[Stop], list[dict[str, Any]]]:
    """UNIT's stops as the history has them pending, and what ``status --json`` lists as
    stopped by the guard and not started again."""
    with History.open(str(state), readonly=True) as h:
        pending = h.pending_stops()
    _code, out, err = cli("--config", str(config), "status", "--json")
    assert out, err
    return pending, json.loads(out)["history"]["not_restored"]


def _gone(job: subprocess.Popen[bytes]) -> None:
    """The save ended: the job exits (as one that saves on SIGINT does: 0)."""
    job.terminate()
    job.wait()


def test_a_unit_still_saving_at_the_veto_stays_pending_and_starts_once_it_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        saving: subprocess.Popen[bytes]) -> None:
    """The job's save outlived [drain] timeout_s: the veto's restore must not start the unit
    under it, nor leave it down for good once the save ends (Restart=on-failure does not
    start a job that exits 0): the next refused attempt's restore starts it."""
    config = configured(tmp_path, monkeypatch)
    state = tmp_path / "state"
    started = _unit(fakes, tmp_path, saving.pid)
    _dropin(tmp_path)
    supervisors = ManagersAndEngines(environ={}, state_dir=str(state),
                                     dropin_root=str(tmp_path / "run"))
    said = io.StringIO()
    with History.open(str(state)) as h:
        vetoed = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(vetoed, "veto", [f"pid {saving.pid} sleep still running"],
                       holders=[_row(saving, "timeout")],  # type: ignore[list-item]
                       stops=[Stop(SERVICE, 0, time.time())]))
        restore_at_once(h.pending_stops(vetoed), supervisors, defaults().restore, h,
                        Logger(said, {}))
    assert not started.exists(), said.getvalue()
    assert not (tmp_path / "run" / f"{UNIT}.d" / DROPIN_NAME).exists()  # the host as found
    pending, listed = _pending(state, config)
    assert [(s.attempt_id, s.result) for s in pending] == [(vetoed, None)], said.getvalue()
    assert "still draining" in pending[0].why
    assert [(p["owner"], p["result"], p["attempt"]) for p in listed] == [
        (SERVICE.key, "pending", vetoed)]

    _gone(saving)
    with History.open(str(state)) as h:  # the next attempt, refused: no sleep follows it
        later = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(later, "veto", ["pid 9 python3 ignores SIGINT"], code="sigint-ignored"))
        restore_at_once(h.pending_stops(later), supervisors, defaults().restore, h,
                        Logger(said, {}))
    assert started.read_text() == "\n", said.getvalue()
    pending, listed = _pending(state, config)
    assert pending == [] and listed == []
    with History.open(str(state), readonly=True) as h:
        attempt = h.attempt(vetoed)
        assert attempt is not None and [s.result for s in attempt.stops] == ["started"]


def test_a_guard_killed_in_its_wait_leaves_a_saving_unit_to_the_next_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        saving: subprocess.Popen[bytes]) -> None:
    """The resume unit runs right after the failed sleep of a killed attempt, while the job
    it signalled still saves: nothing starts beside it; ``restore`` once it has gone does."""
    config = configured(tmp_path, monkeypatch)
    state = tmp_path / "state"
    started = _unit(fakes, tmp_path, saving.pid)
    _dropin(tmp_path)
    row = _row(saving, "signalled", signalled=False)
    with History.open(str(state)) as h:
        killed = h.begin("suspend", "unit", False, "digest")
        h.signalling(killed, [row])  # type: ignore[list-item]
        h.reached(killed, [row.holder])  # type: ignore[list-item]
        h.stop_issued(h.stopping(killed, [Stop(SERVICE, 0, time.time())]), [])
    with contextlib.closing(sqlite3.connect(state / "history.db")) as db, db:
        db.execute("UPDATE attempts SET guard_pid = 0 WHERE id = ?", (killed,))  # it died

    for after_resume in (False, True):  # restore off after a resume leaves it all the same
        config.write_text(config.read_text().replace("[resume]\n", (
            f"[restore]\nafter_resume = {str(after_resume).lower()}\n[resume]\n")))
        code, out, err = cli("--config", str(config), "restore", "--json")
        assert not started.exists(), err
        assert [(r["result"], "still draining" in r["why"])
                for r in json.loads(out)["restored"]] == [("pending", True)], err
        assert code == 3  # a job stays down until a restore runs again: said
        pending, listed = _pending(state, config)
        assert [s.attempt_id for s in pending] == [killed]
        assert [(p["owner"], p["result"]) for p in listed] == [(SERVICE.key, "pending")]
        config.write_text(config.read_text().replace(
            f"[restore]\nafter_resume = {str(after_resume).lower()}\n", ""))

    _gone(saving)
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert (code, started.read_text()) == (0, "\n"), err
    assert [r["result"] for r in json.loads(out)["restored"]] == ["started"]
    assert _pending(state, config) == ([], [])


@pytest.mark.parametrize("kind", ["exited", "signalled", "timeout"])
def test_a_launcher_left_running_is_skipped_as_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        saving: subprocess.Popen[bytes], kind: str) -> None:
    """The unit's main process is no job the drain's signal reached and left running (a
    cron whose job exited, a job a killed guard wrote ahead and never signalled, a kernel
    whose shutdown request was never sent): its stop is done, not left pending for ever
    while it runs on."""
    config = configured(tmp_path, monkeypatch)
    state = tmp_path / "state"
    started = _unit(fakes, tmp_path, saving.pid)
    _dropin(tmp_path)
    with History.open(str(state)) as h:
        attempt = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(attempt, "veto", ["pid 9 python3 still running"],
                       holders=[_row(saving, kind, signalled=False)],  # type: ignore[list-item]
                       stops=[Stop(SERVICE, 0, time.time())]))
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert code == 0 and not started.exists(), err
    [done] = json.loads(out)["restored"]
    assert (done["result"], done["why"].startswith("still running since the drain")) == (
        "skipped", True)
    assert _pending(state, config) == ([], [])


def test_an_owner_stopped_again_by_a_later_attempt_is_started_once_by_that_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any]) -> None:
    """Two stops of UNIT pending (the first left while its job drained, the second a later
    attempt's): the newest brings it back, and the older says so."""
    config = configured(tmp_path, monkeypatch)
    state = tmp_path / "state"
    first = drained_unit(tmp_path, UNIT)
    with History.open(str(state)) as h:
        second = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(second, "allow", stops=[Stop(SERVICE, 0, time.time())]))
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "jobs": {UNIT: [["sh", "-c", f"echo >> {started}"]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert (code, started.read_text()) == (0, "\n"), err
    assert [r["result"] for r in json.loads(out)["restored"]] == ["skipped", "started"]
    with History.open(str(state), readonly=True) as h:
        older, newer = h.attempt(first), h.attempt(second)
        assert older is not None and newer is not None
        assert [(s.result, s.why) for s in older.stops] == [
            ("skipped", f"stopped again by attempt {second}: that stop brings it back")]
        assert [s.result for s in newer.stops] == ["started"]
