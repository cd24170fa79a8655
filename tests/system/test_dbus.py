"""suspendguard.system.dbus against a real dbus-daemon with fake logind and systemd1 on it."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import PrivateBus, dbus_daemon
from helpers.isolation import NO_HOST_BUS
from helpers.wait import wait_for

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import DEFAULT_SYSTEM_BUS, system_bus_address
from suspendguard.system.dbus.logind import (
    Inhibitor,
    LogindInfo,
    list_sessions,
    logind_info,
    sleep_blockers,
    take_inhibitor,
)
from suspendguard.system.dbus.systemd import UnitInfo, unit_info

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="needs dbus-daemon")

Row = tuple[str, str, str, str, int, int]  # ListInhibitors' (ssssuu)
NETWORK_MANAGER: Row = ("sleep", "NetworkManager", "NetworkManager needs to turn off networks",
                        "delay", 0, 812)
BACKUP: Row = ("shutdown:sleep", "backup.sh", "nightly backup running", "block", 1000, 4242)
LOGIND_STATE: dict[str, Any] = {
    "can_suspend": "yes",
    "can_hibernate": "challenge",
    "inhibit_delay_max_usec": 5_000_000,
    "preparing_for_sleep": False,
    "inhibitors": [NETWORK_MANAGER, BACKUP],
}
VETO_UNIT = "suspendguard@suspend.service"
SYSTEMD_STATE: dict[str, Any] = {
    "units": {
        VETO_UNIT: {"LoadState": "loaded", "ActiveState": "failed", "SubState": "failed",
                    "UnitFileState": "enabled", "Result": "exit-code", "ExecMainStatus": 1},
        "suspendguard@hibernate.service": {
            "LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead",
            "UnitFileState": "enabled", "Result": "success", "ExecMainStatus": 0},
    },
}

Start = Callable[..., subprocess.Popen[str]]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def info() -> LogindInfo:
    answer = logind_info()
    assert isinstance(answer, LogindInfo), answer
    return answer


# --- logind ---------------------------------------------------------------------

def test_logind_answers_and_properties(fakes: Start) -> None:
    fakes(LOGIND_STATE)
    answer = info()
    assert answer.can_suspend == "yes"
    assert answer.can_hibernate == "challenge"
    assert answer.inhibitors == (Inhibitor(*NETWORK_MANAGER), Inhibitor(*BACKUP))
    assert answer.inhibit_delay_max_usec == 5_000_000
    assert answer.block_inhibited == "shutdown:sleep"
    assert answer.delay_inhibited == "sleep"
    assert answer.preparing_for_sleep is False
    assert answer.to_json()["inhibitors"][1]["who"] == "backup.sh"


@pytest.mark.parametrize("can", ["na", "no", "challenge"])
def test_can_suspend_passes_logind_words_through(fakes: Start, can: str) -> None:
    fakes({"can_suspend": can, "can_hibernate": "na", "preparing_for_sleep": True})
    answer = info()
    assert (answer.can_suspend, answer.can_hibernate) == (can, "na")
    assert answer.preparing_for_sleep is True
    assert answer.inhibitors == ()
    assert (answer.block_inhibited, answer.delay_inhibited) == ("", "")


def test_sleep_blockers_are_block_locks_on_sleep_held_by_others(fakes: Start) -> None:
    idle_only: Row = ("idle", "gnome-session", "user active", "block", 1000, 77)
    # the guard's own watch: its block is the guard's veto, shown early, not someone else's
    watch: Row = ("sleep", "suspendguard", "pid 9 python3 ignores SIGINT", "block", 0, 88)
    # any user may name a lock so: theirs stops other users' suspends all the same
    named: Row = ("sleep", "suspendguard", "hidden?", "block", 1000, 89)
    fakes({"inhibitors": [NETWORK_MANAGER, BACKUP, idle_only, watch, named]})
    answer = info()
    assert sleep_blockers(answer) == (Inhibitor(*BACKUP), Inhibitor(*named))
    assert sleep_blockers(answer, own_pids=[4242]) == (Inhibitor(*named),)
    assert "backup.sh" in Inhibitor(*BACKUP).describe()


def test_inhibitor_lives_as_long_as_its_fd(fakes: Start) -> None:
    fakes({"inhibitors": [NETWORK_MANAGER]})
    fd = take_inhibitor("sleep", "suspendguard-test", "testing the lock", "block")
    assert isinstance(fd, int), fd
    copy = -1
    try:
        assert Path(f"/proc/self/fd/{fd}").readlink().name.startswith("pipe:")
        assert os.get_inheritable(fd) is False
        ours = Inhibitor("sleep", "suspendguard-test", "testing the lock", "block",
                         os.getuid(), os.getpid())
        answer = info()
        assert answer.inhibitors == (Inhibitor(*NETWORK_MANAGER), ours)
        assert answer.block_inhibited == "sleep"
        assert sleep_blockers(answer) == ()  # our own lock is no warning
        assert sleep_blockers(answer, own_pids=()) == (ours,)

        # Like logind: the lock holds until every copy of the fd is closed.
        copy = os.dup(fd)
        os.close(fd)
        fd = -1
        time.sleep(0.2)
        assert ours in info().inhibitors
        os.close(copy)
        copy = -1
        assert wait_for(lambda: ours not in info().inhibitors), info().inhibitors
        assert info().block_inhibited == ""
    finally:
        for left in (fd, copy):
            if left >= 0:
                os.close(left)


def test_inhibit_refusal_is_an_answer(fakes: Start) -> None:
    fakes()
    answer = take_inhibitor("naps", "suspendguard-test", "bad what", "block")
    assert isinstance(answer, Unavailable)
    assert "org.freedesktop.DBus.Error.InvalidArgs" in answer.reason


# --- systemd --------------------------------------------------------------------

def test_unit_info_for_loaded_and_missing_units(fakes: Start) -> None:
    fakes(SYSTEMD_STATE, services=["systemd"])
    answer = unit_info([VETO_UNIT, "suspendguard@hibernate.service", "nope.service"])
    assert isinstance(answer, dict), answer
    assert answer[VETO_UNIT] == UnitInfo(
        name=VETO_UNIT, load_state="loaded", active_state="failed", sub_state="failed",
        unit_file_state="enabled", result="exit-code", exec_main_status=1)
    assert answer["suspendguard@hibernate.service"].active_state == "inactive"
    missing = answer["nope.service"]
    assert (missing.load_state, missing.found) == ("not-found", False)
    assert answer[VETO_UNIT].found


def test_unit_info_with_no_units_asked(fakes: Start) -> None:
    fakes(SYSTEMD_STATE, services=["systemd"])
    assert unit_info([]) == {}


# --- no answer is an answer -------------------------------------------------------

def test_no_bus_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    address = f"unix:path={tmp_path / 'missing_socket'}"
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", address)
    assert logind_info() == Unavailable(
        f"logind: unavailable: no system bus at {address} (No such file or directory)")
    units = unit_info([VETO_UNIT])
    assert isinstance(units, Unavailable)
    assert units.reason.startswith(f"systemd: unavailable: no system bus at {address}")
    assert isinstance(take_inhibitor("sleep", "t", "t", "block"), Unavailable)


def test_refused_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "dead_socket"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))  # a socket file nobody listens on
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", f"unix:path={path}")
    assert logind_info() == Unavailable(
        f"logind: unavailable: no system bus at unix:path={path} (Connection refused)")


@pytest.mark.parametrize("answer", [b"", b"x" * 8192], ids=["closes", "no-line-end"])
def test_a_bus_that_closes_during_authentication_is_an_answer(tmp_path: Path,
                                                              answer: bytes) -> None:
    """The peer reads the guard's AUTH line, then closes (a user manager that exits, a
    dbus-daemon that drops a connection), or sends bytes with no line end: an answer, not a
    loop that never yields, where no timeout could fire. A child, killed if it spins."""
    path = tmp_path / "closing_socket"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            # The guard sends a NUL byte, then its AUTH line: closing with any of it unread
            # would reset the connection instead of closing it.
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    return
                got += chunk
            conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    code = "from suspendguard.system.dbus.logind import logind_info; print(logind_info())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, env={**os.environ,
                                           "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={path}"})
    thread.join(5)
    server.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Unavailable(reason='logind: unavailable: ") and (
        "while it authenticated the guard" in done.stdout), done.stdout


def test_bus_without_the_services(bus: PrivateBus) -> None:
    assert logind_info() == Unavailable(
        "logind: unavailable: org.freedesktop.login1 is not on the system bus "
        "(org.freedesktop.DBus.Error.ServiceUnknown)")
    assert unit_info([VETO_UNIT]) == Unavailable(
        "systemd: unavailable: org.freedesktop.systemd1 is not on the system bus "
        "(org.freedesktop.DBus.Error.ServiceUnknown)")


def test_service_that_never_answers_times_out(fakes: Start) -> None:
    fakes(silent=True)
    started = time.monotonic()
    # 2 s each: the connection and its authentication come out of it too, before the call
    answer = logind_info(timeout=2.0)
    units = unit_info([VETO_UNIT], timeout=2.0)
    fd = take_inhibitor("sleep", "t", "t", "block", timeout=2.0)
    assert time.monotonic() - started < 20  # it came back; not a measure of precision
    assert isinstance(answer, Unavailable)
    assert answer.reason == ("logind: unavailable: Manager.CanSuspend on "
                             "org.freedesktop.login1 timed out after 2 s")
    assert isinstance(units, Unavailable)
    assert "LoadUnit" in units.reason and "timed out" in units.reason
    assert isinstance(fd, Unavailable)
    assert "Inhibit" in fd.reason and "timed out" in fd.reason


def test_no_fd_is_left_behind(fakes: Start) -> None:
    fakes(LOGIND_STATE)
    before = open_fds()
    for _ in range(3):
        info()
        assert isinstance(unit_info([VETO_UNIT]), dict)
        fd = take_inhibitor("sleep", "t", "t", "delay")
        assert isinstance(fd, int)
        os.close(fd)
    assert open_fds() == before


def test_usable_from_inside_an_event_loop(fakes: Start) -> None:
    fakes(LOGIND_STATE)

    async def from_async_code() -> LogindInfo | Unavailable:
        return logind_info()

    assert isinstance(asyncio.run(from_async_code()), LogindInfo)


# --- the same answers through real client tools --------------------------------------

@pytest.mark.skipif(shutil.which("busctl") is None, reason="needs busctl")
def test_busctl_sees_what_we_see(bus: PrivateBus, fakes: Start) -> None:
    fakes(LOGIND_STATE)
    fd = take_inhibitor("sleep", "suspendguard-test", "cross-check", "block")
    assert isinstance(fd, int), fd
    try:
        out = subprocess.run(
            ["busctl", f"--address={bus.address}", "--json=short", "call",
             "org.freedesktop.login1", "/org/freedesktop/login1",
             "org.freedesktop.login1.Manager", "ListInhibitors"],
            capture_output=True, text=True, timeout=10, check=True).stdout
        reply = json.loads(out)
        assert reply["type"] == "a(ssssuu)"
        assert tuple(Inhibitor(*row) for row in reply["data"][0]) == info().inhibitors
        assert ["sleep", "suspendguard-test", "cross-check", "block",
                os.getuid(), os.getpid()] in reply["data"][0]
    finally:
        os.close(fd)


@pytest.mark.skipif(shutil.which("dbus-send") is None, reason="needs dbus-send")
def test_dbus_send_sees_what_we_see(bus: PrivateBus, fakes: Start) -> None:
    fakes({**LOGIND_STATE, **SYSTEMD_STATE})

    def send(*args: str) -> str:
        return subprocess.run(
            ["dbus-send", f"--bus={bus.address}", "--print-reply=literal", *args],
            capture_output=True, text=True, timeout=10, check=True).stdout.split()[-1]

    answer = info()
    manager = ["--dest=org.freedesktop.login1", "/org/freedesktop/login1"]
    assert send(*manager, "org.freedesktop.login1.Manager.CanSuspend") == answer.can_suspend
    assert send(*manager, "org.freedesktop.DBus.Properties.Get",
                "string:org.freedesktop.login1.Manager",
                "string:InhibitDelayMaxUSec") == str(answer.inhibit_delay_max_usec)
    path = send("--dest=org.freedesktop.systemd1", "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager.LoadUnit", f"string:{VETO_UNIT}")
    assert path == "/org/freedesktop/systemd1/unit/suspendguard_40suspend_2eservice"
    units = unit_info([VETO_UNIT])
    assert isinstance(units, dict)
    assert send("--dest=org.freedesktop.systemd1", path,
                "org.freedesktop.DBus.Properties.Get", "string:org.freedesktop.systemd1.Unit",
                "string:ActiveState") == units[VETO_UNIT].active_state


def test_the_suite_never_asks_the_host_s_system_bus() -> None:
    """A refusal under test tells whom logind lists: never the host's logind, whose users
    are this machine's real ones (tests/conftest.py)."""
    address = system_bus_address()
    assert address != DEFAULT_SYSTEM_BUS
    if address == NO_HOST_BUS:
        assert isinstance(list_sessions(2.0), Unavailable)
