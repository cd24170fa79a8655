"""``suspendguard restore`` when the manager cannot be reloaded once the drain drop-ins went.

The fake systemd1 (tests/fakes/dbus/) on a private bus starts the unit and
refuses the reload as systemd does when /run/systemd is full; the drop-ins
lie in the test's own folder, not /run/systemd/system.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import dbus_daemon
from helpers.records import drained_unit
from helpers.runners import cli

from suspendguard.commands import restore
from suspendguard.errors import HistoryError
from suspendguard.store.history import History
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

UNIT = "train.service"


def drained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A resumed attempt that stopped UNIT through its drop-in, still in place; the config."""
    state = tmp_path / "state"
    drained_unit(tmp_path, UNIT)
    dropins = tmp_path / "run"
    monkeypatch.setattr(restore, "ManagersAndEngines",
                        functools.partial(ManagersAndEngines, dropin_root=str(dropins)))
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{state}"\n'
                      '[idle]\nbackends = []\n[resume]\nhealth_check = false\n')
    return config


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

