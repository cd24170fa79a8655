"""Restore of system units someone else started after the guard stopped them (their marker
gone): a transient one that has ended is not made again, and one a restore's budget did not
reach is recorded skipped, not left to a next restore that could no longer tell.

A real dbus-daemon and the fake systemd1 of tests/fakes/dbus, given the one method the
first test needs and the fake lacks: ``StartTransientUnit``, which writes down each unit it
was asked to make and then starts it as ``StartUnit`` does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import FAKES, PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.dropins import drained, supervisors

from suspendguard.config import defaults
from suspendguard.guard.restore import STARTED_AND_STOPPED, STARTED_MEANWHILE_LATE, restore
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.supervise.setaside import TRANSIENT_FILE
from suspendguard.system.deadline import Deadline, bounded

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

# No `from __future__ import annotations` in it: dbus-next reads the signature from the
# annotations.
SERVE = """
import sys
sys.path.insert(0, {fakes!r})
import fake_systemd, serve
from dbus_next.service import method

class Manager(fake_systemd.Manager):
    @method()
    def StartTransientUnit(self, name: "s", mode: "s", properties: "a(sv)",
                           aux: "a(sa(sv))") -> "o":
        with open({made!r}, "a") as f:
            f.write(name + "\\n")
        return fake_systemd.Manager.StartUnit.__wrapped__(self, name, mode)

fake_systemd.Manager = Manager
serve.main()
"""
RECORD = {"description": "train", "exec_start": [["/bin/true", ["/bin/true"], False]],
          "environment": [], "working_directory": "", "user": "", "group": "",
          "restart": "no", "restart_usec": 100000, "slice": "", "service_type": "",
          "kill_mode": "", "kill_signal": 2}


@contextmanager
def systemd(tmp_path: Path, state: dict[str, Any]) -> Iterator[PrivateBus]:
    script = tmp_path / "serve_systemd.py"
    script.write_text(SERVE.format(fakes=str(FAKES), made=str(tmp_path / "made")))
    with private_system_bus() as bus, fake_service(bus, state, services=["systemd"],
                                                   serve=script):
        yield bus


def test_a_transient_unit_someone_else_started_again_and_that_ended_is_not_made_again(
        tmp_path: Path) -> None:
    """Made again from its record, it would start a job whoever ran it since had ended or
    stopped: theirs, and its record goes."""
    owner = Owner("systemd-service", "run-u7.service", transient=True)
    drained(tmp_path, owner.name, started_since=True)
    recorded: list[tuple[str, str]] = []
    with systemd(tmp_path, {"units": {}}) as bus:  # gone: systemd unloaded it
        control = supervisors(tmp_path, bus)
        control.transient.put(owner.key, RECORD)
        [done] = restore([Stop(owner, 1, 1000.0)], control, defaults().restore, enabled=True,
                         record=lambda _s, r, w: recorded.append((r, w)),
                         log=lambda _line: None, warn=lambda _line: None)
    assert not (tmp_path / "made").exists(), "made again over someone else's stop"
    assert (done.result, done.why) == ("skipped", STARTED_AND_STOPPED)
    assert recorded == [("skipped", STARTED_AND_STOPPED)]
    assert not (tmp_path / "state" / TRANSIENT_FILE).exists()
    assert control.transient.get(owner.key) is None


def test_the_fake_makes_a_transient_unit_not_started_since_again(tmp_path: Path) -> None:
    """What lets the test above fail: with its marker in place, the same unit is made."""
    owner = Owner("systemd-service", "run-u7.service", transient=True)
    drained(tmp_path, owner.name)
    with systemd(tmp_path, {"units": {}}) as bus:
        control = supervisors(tmp_path, bus)
        control.transient.put(owner.key, RECORD)
        [done] = restore([Stop(owner, 1, 1000.0)], control, defaults().restore, enabled=True,
                         record=lambda *_: None, log=lambda _line: None,
                         warn=lambda _line: None)
    assert (tmp_path / "made").read_text() == f"{owner.name}\n", done


def test_a_unit_started_by_someone_else_whose_turn_the_budget_missed_is_skipped_not_pending(
        tmp_path: Path) -> None:
    """The restore took every drop-in and marker away before its first start: left pending,
    the next restore would find no marker, and start what someone started and stopped."""
    slow, theirs = (Owner("systemd-service", "slow.service"),
                    Owner("systemd-service", "theirs.service"))
    drained(tmp_path, slow.name)
    drained(tmp_path, theirs.name, started_since=True)
    started = tmp_path / "theirs-started"
    units = {u.name: {"LoadState": "loaded", "ActiveState": "inactive"} for u in (slow, theirs)}
    jobs = {slow.name: [["sleep", "3"]], theirs.name: [["touch", str(started)]]}
    recorded: dict[str, tuple[str, str]] = {}
    stops = [Stop(slow, 1, 1000.0), Stop(theirs, 2, 1000.0)]
    budget = Deadline(time.monotonic() + 1.5)

    def record(stop: Stop, result: str, why: str) -> None:
        recorded[stop.owner.name] = (result, why)
        # A start's wait leaves the budget half a second for its answer; a slow history
        # write (a loaded disk) takes that.
        time.sleep(max(0.0, budget.left()) + 0.05)

    with systemd(tmp_path, {"units": units, "jobs": jobs}) as bus:
        control = supervisors(tmp_path, bus)
        with bounded(budget):  # the slow start takes most of it
            done = restore(stops, control, defaults().restore, enabled=True, record=record,
                           log=lambda _line: None, warn=lambda _line: None)
    assert [d.result for d in done] == ["starting", "skipped"], [d.describe() for d in done]
    assert recorded[theirs.name] == ("skipped", STARTED_MEANWHILE_LATE)
    assert not started.exists()
    assert not (tmp_path / "run" / f"{theirs.name}.d").exists()
