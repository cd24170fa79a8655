"""``suspendguard restore`` putting back a drop-in a killed guard run left: a manager that
cannot be reloaded after it is removed is one of restore's warnings, and exit 3, as for the
drop-ins of the jobs it starts; one reloaded is said, and is no failure.

The fake systemd1 (tests/fakes/dbus/) on a private bus refuses the reload as systemd does
when /run/systemd is full; the drop-ins lie in the test's own folder.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import dbus_daemon
from helpers.runners import cli

from suspendguard.commands import restore
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

UNIT = "train.service"


def left_by_a_killed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A drain drop-in on UNIT that no stop in the history owns; the config."""
    folder = tmp_path / "run" / f"{UNIT}.d"
    folder.mkdir(parents=True)
    (folder / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    monkeypatch.setattr(restore, "ManagersAndEngines",
                        functools.partial(ManagersAndEngines, dropin_root=str(tmp_path / "run")))
    config = tmp_path / "config.toml"
    config.write_text(f'[devices]\nfamilies = []\n[state]\ndir = "{tmp_path / "state"}"\n'
                      '[idle]\nbackends = []\n[resume]\nhealth_check = false\n')
    return config


@pytest.mark.parametrize("reload_fails", [True, False])
def test_a_killed_runs_drop_in_whose_manager_is_not_reloaded_makes_restore_exit_3(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fakes: Callable[..., Any],
        reload_fails: bool) -> None:
    config = left_by_a_killed_run(tmp_path, monkeypatch)
    fakes({"reload_fails": reload_fails}, services=["systemd"])
    code, out, err = cli("--config", str(config), "restore", "--json")
    assert "Traceback" not in err, err
    assert not (tmp_path / "run" / f"{UNIT}.d" / DROPIN_NAME).exists()
    [line] = [w for w in err.splitlines() if "removed the drain drop-in a killed guard run" in w]
    assert line.startswith(f"suspendguard: warning: removed the drain drop-in a killed guard run "
                           f"left on {UNIT}; ")
    warnings = json.loads(out)["warnings"]
    if not reload_fails:
        assert line.endswith("its manager was reloaded")
        assert (code, warnings) == (0, [])
        return
    assert "was not reloaded" in line and line.endswith("run systemctl daemon-reload")
    assert warnings == [line.removeprefix("suspendguard: warning: ")]
    assert code == 3
