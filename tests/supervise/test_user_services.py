"""guard/user_services.py: a user's manager asked over its private socket with systemd's calls.

A real dbus-daemon listens where a user manager's private socket lies
(``RUNTIME/systemd/private``) and the fake systemd1 (tests/fakes/dbus/)
answers on it; the container tests ask a real user manager the same way.
"""

from __future__ import annotations

import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.dbus import PrivateBus, dbus_daemon, fake_service, private_system_bus
from helpers.users import unknown_uid

from suspendguard.model import Owner, Unavailable
from suspendguard.supervise import leftovers, usermanager
from suspendguard.supervise.dropin import DROPIN_NAME
from suspendguard.supervise.managers import ManagersAndEngines
from suspendguard.supervise.user_services import UserServices

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

UID = pwd.getpwnam("nobody").pw_uid
UNIT = "train.service"
STATE = {"units": {UNIT: {"LoadState": "loaded", "ActiveState": "active", "SubState": "running",
                          "Restart": "always", "RestartUSec": 1_500_000,
                          "TimeoutStopUSec": 90_000_000}}}


@pytest.fixture
def user_manager(monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateBus]:
    with private_system_bus("systemd/private") as bus, \
            fake_service(bus, STATE, services=["systemd"]):
        monkeypatch.setattr(usermanager, "runtime_dir", lambda uid: str(bus.folder))
        yield bus


def owner() -> Owner:
    return Owner("user-service", UNIT, uid=UID)


def test_the_spans_come_as_numbers_from_the_users_manager(user_manager: PrivateBus) -> None:
    states = UserServices(time.monotonic).states(owner())
    assert not isinstance(states, Unavailable), states
    st = states[UNIT]
    assert (st.load_state, st.active_state, st.restart) == ("loaded", "active", "always")
    assert (st.restart_delay_s, st.timeout_stop_s) == (1.5, 90.0)


def test_reload_and_start_go_to_the_users_manager(user_manager: PrivateBus) -> None:
    users = UserServices(time.monotonic)
    assert users.reload(UID) is None
    assert users.start(owner(), wait=True) == "active"
    after = users.after_stop([owner()], time.monotonic() + 1.0)
    assert not isinstance(after, Unavailable), after
    assert after[owner().key].active_state == "active"


def test_a_manager_without_its_socket_is_unavailable_with_the_path(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(usermanager, "runtime_dir", lambda uid: str(tmp_path))
    states = UserServices(time.monotonic).states(owner())
    assert isinstance(states, Unavailable)
    assert states.reason == (f"systemd: unavailable: no systemd private socket at "
                             f"unix:path={tmp_path}/systemd/private (No such file or directory)")


def test_an_owner_of_unknown_uid_is_asked_nothing() -> None:
    answer = UserServices(time.monotonic).start(Owner("user-service", UNIT), wait=False)
    assert isinstance(answer, Unavailable)
    assert answer.reason == "the user manager's uid is not known"


def test_a_user_manager_not_reloaded_is_named_with_its_units_and_its_fix(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with private_system_bus("systemd/private") as bus, \
            fake_service(bus, {**STATE, "reload_fails": True}, services=["systemd"]):
        monkeypatch.setattr(usermanager, "runtime_dir", lambda uid: str(bus.folder))
        failed = ManagersAndEngines(dropin_root=str(tmp_path), environ={}).reload([owner()])
    assert isinstance(failed, Unavailable)
    assert failed.reason.startswith(f"user@{UID}.service's manager was not reloaded after the "
                                    f"drain drop-ins of {UNIT} were removed (")
    assert "not enough space" in failed.reason and "Restart=no" in failed.reason
    assert failed.reason.endswith(f"env XDG_RUNTIME_DIR={bus.folder} systemctl --user "
                                  "daemon-reload")


def test_a_leftover_drop_in_that_could_not_be_removed_is_said_so_not_said_removed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A killed run left drop-ins for a system unit and for a user whose account is gone since:
    # the user's cannot be removed as that user, and no line may say it was.
    uid = unknown_uid()
    monkeypatch.setattr(leftovers, "user_dropins",
                        lambda: [Owner("user-service", UNIT, uid=uid)])  # /run/user/UID/...
    system = tmp_path / "run" / "infer.service.d"
    system.mkdir(parents=True)
    (system / DROPIN_NAME).write_text("[Service]\nRestart=no\n")
    with private_system_bus() as bus, fake_service(bus, {}, services=["systemd"]):
        notes = ManagersAndEngines(dropin_root=str(tmp_path / "run"), bus_address=bus.address,
                                   environ={}).clean_leftovers()
    assert notes == [
        f"the drain drop-in of {UNIT} (uid {uid}) could not be removed (uid {uid} has no user "
        f"account): remove /run/user/{uid}/systemd/user/UNIT.d/{DROPIN_NAME} by hand",
        "removed the drain drop-in a killed guard run left on infer.service; its manager was "
        "reloaded"]
    assert not system.exists()
