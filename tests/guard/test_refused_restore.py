"""A run refused the guard lock restores nothing: the stops an earlier restore left pending
while their job drained are the lock holder's (a drain, the resume unit's restore).

The lock is the real one, held by another process; the unit is the fake systemd1's
(tests/fakes/dbus/) on a private bus, its drop-in in the test's own folder.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import dbus_daemon
from helpers.holders import Holders
from helpers.locks import hold_guard_lock
from helpers.records import ended
from helpers.runners import guard

from suspendguard.guard.restore import STILL_DRAINING
from suspendguard.model import Owner
from suspendguard.record import Stop
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME, MARKER_NAME
from suspendguard.supervise.managers import ManagersAndEngines

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

UNIT = "train.service"
SERVICE = Owner("systemd-service", UNIT)


def test_a_run_refused_the_lock_starts_no_job_an_earlier_restore_left_pending(
        make_config: Any, tmp_path: Path, fakes: Callable[..., Any], node: str,
        holders: Holders, children: list[subprocess.Popen[str]]) -> None:
    state, run = tmp_path / "state", tmp_path / "run"
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "jobs": {UNIT: [["sh", "-c", f"echo >> {started}"]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    with History.open(str(state)) as h:  # a veto's restore found the job still saving
        vetoed = h.begin("suspend", "unit", False, "digest")
        h.finish(ended(vetoed, "veto", ["pid 9 python3 still running"],
                       stops=[Stop(SERVICE, 1, time.time())]))
        [stop] = h.pending_stops(vetoed)
        h.record_restore(stop.id, "pending", STILL_DRAINING)
    dropin = run / f"{UNIT}.d"
    dropin.mkdir(parents=True)
    (dropin / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    (dropin / MARKER_NAME).write_text("")
    holder = hold_guard_lock(state, children)

    supervisors = ManagersAndEngines(environ={}, state_dir=str(state), dropin_root=str(run))
    report = guard(make_config(drain={"timeout_s": 1, "deadline_s": 3}), supervisors=supervisors)
    assert [r.code for r in report.verdict.reasons] == ["guard-busy"], report.verdict
    assert not started.exists()  # no start job ran
    assert (dropin / DROPIN_NAME).exists() and (dropin / MARKER_NAME).exists()
    with History.open(str(state), readonly=True) as h:
        assert [(s.id, s.result, s.why) for s in h.pending_stops()] == [
            (stop.id, None, STILL_DRAINING)]

    holder.kill()  # the lock's holder gone, the next refused run takes the stop along
    holder.wait()
    holders.start(node, mode="deaf")
    report = guard(make_config(drain={"timeout_s": 1, "deadline_s": 3}), supervisors=supervisors)
    assert [r.code for r in report.verdict.reasons] == ["sigint-ignored"], report.verdict
    assert started.read_text() == "\n" and not (dropin / DROPIN_NAME).exists()
