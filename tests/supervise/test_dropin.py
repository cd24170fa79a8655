"""The drain drop-in's text: what systemd reads while the guard drains a unit."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from suspendguard.model import Owner
from suspendguard.supervise import leftovers
from suspendguard.supervise.dropin import DROPIN_NAME, dropin_text, exec_path, stop_timeout
from suspendguard.supervise.managers import ManagersAndEngines


def test_the_drop_in_keeps_the_unit_down_and_removes_its_marker_with_full_privileges() -> None:
    text = dropin_text("SIGINT", "/run/systemd/system/a.service.d/suspendguard-stopped")
    assert text.splitlines()[1:] == [
        # An exit status the unit forces restarts on would restart it whatever Restart= says.
        "[Service]", "Restart=no", "RestartForceExitStatus=", "KillSignal=SIGINT",
        "ExecStartPre=-+/bin/rm -f /run/systemd/system/a.service.d/suspendguard-stopped"]


def test_escaped_unit_names_and_specifiers_survive_systemd_unescaping() -> None:
    # systemd turns "\\x2d" back into "\x2d" and "%%" into "%" on an ExecStart= line
    assert exec_path("/run/systemd/system/sv\\x2dhard.service.d/m") == \
        "/run/systemd/system/sv\\\\x2dhard.service.d/m"
    assert exec_path("/run/a%i.service.d/m") == "/run/a%%i.service.d/m"


def test_a_stop_timeout_shorter_than_the_drain_is_raised_and_others_kept() -> None:
    assert stop_timeout(1.0, 4.0) == 5.0
    assert stop_timeout(90.0, 4.0) is None
    assert stop_timeout(0.0, 4.0) is None  # infinite, or not known
    assert "TimeoutStopSec=5s\n" in dropin_text("SIGINT", "/m", stop_timeout(1.0, 4.0))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_drop_in_is_applied_after_an_admins_own(tmp_path: Path) -> None:
    # systemd applies a unit's drop-ins in the order of their names, the last value winning:
    # an admin's override.conf (systemctl edit) sorted after 50-..., and its Restart=always
    # started the job again under the drain.
    unit = tmp_path / "etc/systemd/system/train.service"
    (unit.parent / "train.service.d").mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/bin/true\n")
    for name in ("override.conf", "99-site.conf", "50-local.conf"):
        (unit.parent / "train.service.d" / name).write_text("[Service]\nRestart=always\n")
    ours = tmp_path / "run/systemd/system/train.service.d" / DROPIN_NAME
    ours.parent.mkdir(parents=True)
    ours.write_text(dropin_text("SIGINT", "/run/marker"))
    shown = subprocess.run(
        ["systemd-analyze", f"--root={tmp_path}", "cat-config", "systemd/system/train.service"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    applied = [line[2:] for line in shown.splitlines() if line.startswith("# /")]
    assert len(applied) == 5 and applied[-1] == str(ours), applied


def test_a_drop_in_of_the_former_name_is_found_and_removed_alike(tmp_path: Path) -> None:
    # Left by an earlier version (a stop held after resume across an upgrade): /run keeps it
    # until the next boot, and its Restart=no with it.
    folder = tmp_path / "train.service.d"
    folder.mkdir()
    (folder / "50-suspendguard-drain.conf").write_text("[Service]\nRestart=no\n")
    assert leftovers.system_dropins(str(tmp_path)) == ["train.service"]
    supervisors = ManagersAndEngines(dropin_root=str(tmp_path), bus_address="", environ={},
                                     state_dir=str(tmp_path / "state"))
    supervisors.remove_dropins([Owner("systemd-service", "train.service")])
    assert not folder.exists()
