"""``suspendguard restore`` when the manager cannot be reloaded once the drain drop-ins went,
after a sleep that followed no attempt or a veto, and when a hold cannot be recorded.

The fake systemd1 (tests/fakes/dbus/) on a private bus starts the unit and
refuses the reload as systemd does when /run/systemd is full; the drop-ins
lie in the test's own folder, not /run/systemd/system. The check after
resume is a fake that answers what the test says and keeps what it was asked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import sqlite3
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
from suspendguard.errors import HistoryError
from suspendguard.health.model import HealthReport
from suspendguard.health.resume import AfterResume
from suspendguard.record import DeviceHealth
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines

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
