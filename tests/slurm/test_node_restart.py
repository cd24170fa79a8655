"""A node held up after its drain ([slurm] power_off failed): the jobs the drain stopped
through their supervisors are started again (``slurm node restart``), as after a veto.

The fake systemd1 (tests/fakes/dbus/) on a private bus starts the unit; the drain's drop-in
lies in the test's own folder, not /run/systemd/system.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import dbus_daemon
from helpers.locks import hold_guard_lock
from helpers.records import drained_unit
from helpers.runners import cli

from slurm.test_controller import controller, going_down
from suspendguard.slurm import controller as controller_module
from suspendguard.store import lock as guard_lock
from suspendguard.store.history import History
from suspendguard.supervise import managers
from suspendguard.supervise.dropin import DROPIN_NAME

UNIT = "train.service"


@pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")
@pytest.mark.parametrize(("now", "result"), [("inactive", "started"), ("active", "skipped")])
def test_the_jobs_a_drain_stopped_are_started_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any], now: str,
        result: str) -> None:
    """Those it started are said started; one it did not (its unit still active: a launcher
    the drain left running) is not."""
    state = tmp_path / "state"
    attempt = drained_unit(tmp_path, UNIT, origin="slurm")
    dropin = tmp_path / "run" / f"{UNIT}.d"
    monkeypatch.setattr(managers, "ManagersAndEngines", functools.partial(
        managers.ManagersAndEngines, dropin_root=str(tmp_path / "run")))
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": now}},
           "jobs": {UNIT: [["touch", str(started)]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{state}"\n'
                      '[idle]\nbackends = []\n[slurm]\nnode_name = "gpu3"\n')
    code, out, err = cli("--config", str(config), "slurm", "node", "restart", "--attempt",
                         str(attempt))
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["started"]) == (
        0, "allow", [UNIT] if result == "started" else []), err
    assert started.exists() == (result == "started") and not (dropin / DROPIN_NAME).exists()
    with History.open(str(state), readonly=True) as h:
        assert [s.result for s in h.attempts(1)[0].stops] == [result]


@pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")
def test_no_job_is_started_again_while_another_run_holds_the_guard_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        children: list[subprocess.Popen[str]]) -> None:
    """A drain or a restore in progress owns the stops meanwhile: restart starts nothing,
    answers unknown, and the stop stays pending for that run or the next restore."""
    state = tmp_path / "state"
    attempt = drained_unit(tmp_path, UNIT, origin="slurm")
    monkeypatch.setattr(managers, "ManagersAndEngines", functools.partial(
        managers.ManagersAndEngines, dropin_root=str(tmp_path / "run")))
    monkeypatch.setattr(guard_lock, "LOCK_WAIT_S", 0.2)
    started = tmp_path / "started"
    fakes({"units": {UNIT: {"LoadState": "loaded", "ActiveState": "inactive"}},
           "jobs": {UNIT: [["touch", str(started)]]}, "stop_jobs": {UNIT: []}},
          services=["systemd"])
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{state}"\n'
                      '[idle]\nbackends = []\n[slurm]\nnode_name = "gpu3"\n')
    hold_guard_lock(state, children)
    code, out, err = cli("--config", str(config), "slurm", "node", "restart", "--attempt",
                         str(attempt))
    assert (code, json.loads(out)["verdict"]) == (5, "unknown"), err
    assert "not started again: another suspendguard run (pid " in err, err
    assert not started.exists()
    assert (tmp_path / "run" / f"{UNIT}.d" / DROPIN_NAME).exists()
    with History.open(str(state), readonly=True) as h:
        assert [s.result for s in h.attempts(1)[0].stops] == [None]


def test_the_controller_asks_a_node_it_could_not_power_off_to_start_its_jobs_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "REGISTER_S", 0.1)
    monkeypatch.setattr(controller_module, "REGISTER_AFTER_RESTART_S", 0.1)
    asked = tmp_path / "asked"
    guard = (sys.executable, "-c", f"""
import json, sys
open({str(asked)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
doc = {{"node": "gpu3", "verdict": "allow", "reasons": [], "reason_details": []}}
if sys.argv[3] == "prepare":
    doc["attempt"] = 7
else:
    doc["started"] = ["train.service"]
print(json.dumps(doc))""")
    c, err = controller(tmp_path, "allow", (sys.executable, "-c", "import sys; sys.exit(3)"),
                        str(going_down(tmp_path).path))
    c.config = replace(c.config, guard=guard)
    assert not c._suspend_one("gpu3")
    assert asked.read_text().splitlines()[:2] == ["slurm node prepare --as gpu3",
                                                  "slurm node restart --attempt 7 --as gpu3"]
    assert "gpu3: started again what its drain stopped: train.service" in err.getvalue()
    assert "gpu3: not powered down: suspendguard: power-action-failed" in err.getvalue()


@pytest.mark.parametrize("attempt", ["0", "-1", str(2**63), "99999999999999999999"])
def test_an_attempt_no_history_can_hold_is_a_usage_error(tmp_path: Path, attempt: str) -> None:
    # An ID past SQLite's INTEGER overflowed its read: a traceback, not the usage error.
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[slurm]\nnode_name = "gpu3"\n')
    code, out, err = cli("--config", str(config), "slurm", "node", "restart", "--attempt",
                         attempt)
    assert (code, out) == (2, "")
    assert err == (f"suspendguard: slurm node restart: --attempt {attempt}: give the attempt's "
                   "ID that prepare answered with\n")


def test_the_largest_attempt_id_is_asked_of_the_history(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[slurm]\nnode_name = "gpu3"\n')
    code, out, err = cli("--config", str(config), "slurm", "node", "restart", "--attempt",
                         str(2**63 - 1))
    doc = json.loads(out)
    assert (code, doc["verdict"], doc["started"]) == (0, "allow", []), err
