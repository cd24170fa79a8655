"""Restore of system units through the real supervisors, asked over D-Bus: what someone else did
to a unit since the drain is theirs, and a transient unit not made again stays to be made.

A real dbus-daemon, and the fake systemd1 of tests/fakes/dbus run as it is but for one property
systemd has and the fake lacks: ``InactiveEnterTimestampMonotonic`` (from the state's unit, as systemd
reports when the unit last went down). A launcher left running by the drain is a real process
(the unit's MainPID: active while it runs), which the test itself ends as an operator's stop.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import FAKES, PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.dropins import drained, supervisors

from suspendguard.config import defaults
from suspendguard.guard.restore import Restored, restore
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.supervise.managers import LEFT_RUNNING_FILE, ManagersAndEngines
from suspendguard.supervise.setaside import TRANSIENT_FILE
from suspendguard.system.deadline import Deadline

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

# fake_systemd's Unit with systemd's InactiveEnterTimestampMonotonic (microseconds of
# CLOCK_MONOTONIC).
# No `from __future__ import annotations`: dbus-next reads the signature from the annotation.
SERVE = """
import sys
sys.path.insert(0, {fakes!r})
import fake_systemd, serve
from dbus_next.service import PropertyAccess, dbus_property

class Unit(fake_systemd.Unit):
    @dbus_property(access=PropertyAccess.READ)
    def InactiveEnterTimestampMonotonic(self) -> "t":
        return int(self.props.get("InactiveEnterTimestampMonotonic", 0))

fake_systemd.Unit = Unit
serve.main()
"""
STOP_TIME = 1000.0


@contextmanager
def systemd(tmp_path: Path, units: dict[str, dict[str, Any]],
            **state: Any) -> Iterator[PrivateBus]:
    script = tmp_path / "serve_systemd.py"
    script.write_text(SERVE.format(fakes=str(FAKES)))
    with private_system_bus() as bus, fake_service(bus, {"units": units, **state},
                                                   services=["systemd"], serve=script):
        yield bus


def restored(stop: Stop, control: ManagersAndEngines) -> Restored:
    [done] = restore([stop], control, defaults().restore, enabled=True,
                     record=lambda *_: None, log=lambda _line: None, warn=lambda _line: None)
    return done


@pytest.fixture
def launcher() -> Iterator[subprocess.Popen[bytes]]:
    """A cron-like main process: it holds nothing and outlives the drained job."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(("down_after_s", "boot", "result"), [
    (60.0, None, "skipped"), (0.0, None, "started"), (20.0, None, "started"),
    (60.0, "an earlier boot", "started")])
def test_a_launcher_left_running_that_someone_stopped_after_the_drain_stays_down(
        tmp_path: Path, launcher: subprocess.Popen[bytes], down_after_s: float,
        boot: str | None, result: str) -> None:
    """Left running through the drain (its marker in place), then stopped by an operator
    before restore: theirs. One that went down as its job ended, or a slow launcher that
    noticed it seconds later, is started again; so is one seen in an earlier boot, whose
    monotonic time says nothing of this one's."""
    (tmp_path / "state").mkdir()
    started = tmp_path / "started"
    owner = Owner("systemd-service", "cron.service")
    stop = Stop(owner, 1, STOP_TIME)
    drained(tmp_path, owner.name)
    down_at = time.monotonic() + down_after_s
    units = {owner.name: {"ActiveState": "active", "MainPID": launcher.pid,
                          "InactiveEnterTimestampMonotonic": int(down_at * 1e6)}}
    with systemd(tmp_path, units, jobs={owner.name: [["touch", str(started)]]},
                 stop_jobs={owner.name: []}) as bus:
        control = supervisors(tmp_path, bus)
        assert control.settle([stop], Deadline(time.monotonic() + 10)) == []
        left = tmp_path / "state" / LEFT_RUNNING_FILE
        [(key, [stopped, seen, this_boot])] = json.loads(left.read_text()).items()
        assert (key, stopped) == (owner.key, STOP_TIME) and this_boot
        if boot is not None:
            left.write_text(json.dumps({key: [stopped, seen, boot]}))
        launcher.kill()  # systemctl stop cron.service, by someone else
        launcher.wait()
        done = restored(stop, control)
    assert done.result == result, done.why
    if result == "skipped":
        assert "was stopped by someone else after the drain" in done.why
        assert not started.exists()
    else:
        assert started.exists()


def test_a_unit_started_by_someone_else_and_still_stopping_is_not_started(
        tmp_path: Path) -> None:
    """Started after the drain (its marker gone), then stopped by whoever started it, and
    that stop still runs: a start queued behind it would undo their stop."""
    started = tmp_path / "started"
    owner = Owner("systemd-service", "train.service")
    drained(tmp_path, owner.name, started_since=True)
    units = {owner.name: {"ActiveState": "deactivating"}}
    with systemd(tmp_path, units, jobs={owner.name: [["touch", str(started)]]}) as bus:
        done = restored(Stop(owner, 1, STOP_TIME), supervisors(tmp_path, bus))
        time.sleep(0.3)  # a queued start job would have run by now
    assert (done.result, done.why) == (
        "skipped", "started and stopped again by someone else after the guard stopped it")
    assert not started.exists()


def test_a_transient_unit_systemd_did_not_make_again_keeps_its_record_and_stays_pending(
        tmp_path: Path) -> None:
    """StartTransientUnit refused (the fake has no such method, as a manager that refuses
    it): `systemctl start` cannot bring back a unit that is gone, the next restore can."""
    owner = Owner("systemd-service", "run-u7.service", transient=True)
    control = ManagersAndEngines(dropin_root=str(tmp_path / "run"), environ={},
                                 state_dir=str(tmp_path / "state"))
    (tmp_path / "state").mkdir()
    record = {"description": "train", "exec_start": [["/bin/true", ["/bin/true"], False]],
              "environment": [], "working_directory": "", "user": "", "group": "",
              "restart": "always", "restart_usec": 100000, "slice": "", "service_type": "",
              "kill_mode": "", "kill_signal": 2}
    control.transient.put(owner.key, record)
    with systemd(tmp_path, {}) as bus:
        control.bus_address = bus.address
        done = restored(Stop(owner, 1, STOP_TIME), control)
    assert done.result == "pending", done.why
    assert done.why.startswith("it could not be made again as a transient unit (")
    assert done.why.endswith("its recorded settings are kept, and suspendguard restore tries "
                             "again")
    kept = json.loads((tmp_path / "state" / TRANSIENT_FILE).read_text())
    assert kept == {owner.key: record}
