"""The drain's drop-ins as the guard leaves them under a folder of the test's own, and the
supervisors that read them there (ManagersAndEngines, its systemd on a private bus)."""

from __future__ import annotations

from pathlib import Path

from helpers.dbus import PrivateBus
from suspendguard.supervise.dropin import DROPIN_NAME, MARKER_NAME
from suspendguard.supervise.managers import ManagersAndEngines


def drained(tmp_path: Path, unit: str, *, started_since: bool = False) -> None:
    """The drain drop-in as the guard wrote it; its marker gone once someone started the unit."""
    folder = tmp_path / "run" / f"{unit}.d"
    folder.mkdir(parents=True)
    (folder / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    if not started_since:
        (folder / MARKER_NAME).touch()


def supervisors(tmp_path: Path, bus: PrivateBus) -> ManagersAndEngines:
    """The supervisors, their drop-ins under ``tmp_path``/run, their state in ``tmp_path``/state."""
    (tmp_path / "state").mkdir(exist_ok=True)
    return ManagersAndEngines(dropin_root=str(tmp_path / "run"), bus_address=bus.address,
                              environ={}, state_dir=str(tmp_path / "state"))
