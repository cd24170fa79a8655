"""Telling users of a refused suspend: which sessions, the words, the desktop, the terminals,
the bound, and the [notify] keys.

Sessions come from the fake logind on a private dbus-daemon; the desktop
notification goes through the real child (python -m suspendguard.notify.send,
run as a user by system/runner.py) to a fake notification server on that bus;
the terminal is a real pseudo-terminal whose other end the test reads.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pty
import pwd
import shutil
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.dbus import FAKES, PrivateBus, _read_line, _stop

from suspendguard.config import defaults
from suspendguard.config.load import build
from suspendguard.config.schema import NotifyConfig
from suspendguard.errors import ConfigError
from suspendguard.model import Unavailable
from suspendguard.notify.tell import Message, message, tell, told_sessions
from suspendguard.notify.terminals import write_terminal
from suspendguard.system.dbus.logind import LoginSession, list_sessions
from suspendguard.system.dbus.notifications import notify
from suspendguard.system.log import Logger
from suspendguard.system.terminal import when
from suspendguard.verdict import Reason, Verdict

VETO = Verdict("veto", (
    Reason("sigint-ignored", "pid 4242 (trainer) ignores SIGINT: the guard cannot stop it",
           pid=4242, comm="trainer"),
    Reason("device-busy", "/dev/accel0 is still busy"),
))
ME = os.getuid()


def session(sid: str, **kw: Any) -> dict[str, Any]:
    return {"id": sid, "uid": ME, "name": "alice", **kw}


SESSIONS = [
    session("1", type="x11", display=":0", seat="seat0"),
    session("2", type="wayland", active=False, seat="seat0"),  # switched away from
    session("3", type="x11", **{"class": "greeter"}, name="lightdm", uid=ME + 1),
    session("4", type="tty", tty="pts/3", remote=True),
    session("5", type="tty", tty="pts/4", name="bob", uid=ME + 2),
    session("6", type="tty", tty="pts/5", state="closing"),
    session("7", type="x11", name="bob", uid=ME + 2),
]


@pytest.fixture
def logind(bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]]) -> PrivateBus:
    fakes({"sessions": SESSIONS}, services=["logind"])
    return bus


@pytest.fixture
def notifications(bus: PrivateBus, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Start a fake notification server on the bus; the file its Notify calls go to."""
    procs: list[subprocess.Popen[str]] = []

    def start(silent: bool = False, caps: str = "body,body-markup") -> Path:
        log = tmp_path / "notified.jsonl"
        argv = [sys.executable, str(FAKES / "fake_notifications.py"), "--address", bus.address,
                "--log", str(log), "--caps", caps] + (["--silent"] if silent else [])
        err = tmp_path / "fake-notifications.err"
        with open(err, "w") as f:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=f, text=True)
        procs.append(proc)
        assert _read_line(proc, "the fake notification server", err) == "READY"
        return log

    yield start
    for proc in procs:
        _stop(proc)


def test_logind_sessions_are_read_with_their_properties(logind: PrivateBus) -> None:
    found = list_sessions(address=logind.address)
    assert isinstance(found, tuple), found
    by_id = {s.id: s for s in found}
    assert by_id["1"] == LoginSession("1", ME, "alice", "x11", "user", True, False, "active",
                                      "", ":0")
    assert by_id["4"].tty == "pts/3" and by_id["4"].remote
    assert [s.id for s in found if s.graphical] == ["1", "7"]


def test_who_is_told(logind: PrivateBus) -> None:
    found = list_sessions(address=logind.address)
    assert isinstance(found, tuple)
    terminals, desktops = told_sessions(found, ())
    # Active graphical sessions of users, one per user; greeters and background
    # sessions are nobody to tell; every live terminal.
    assert [s.id for s in desktops] == ["1", "7"]
    assert [s.tty for s in terminals] == ["pts/3", "pts/4"]
    terminals, desktops = told_sessions(found, ("bob",))
    assert [s.id for s in desktops] == ["7"] and [s.tty for s in terminals] == ["pts/4"]


def test_the_words() -> None:
    one = message(Verdict("unknown", (Reason("uninspected", "pid 7 could not be read"),)),
                  "hibernate")
    assert one.summary == "Hibernate refused by suspendguard"
    # A user told is seldom root, and the history is root's: sudo, or the unit's journal.
    # No more reasons to point to: the refusal's details (the history lists it first).
    assert one.body == ("pid 7 could not be read\ndetails: sudo suspendguard history "
                        "(or journalctl -u suspendguard@hibernate.service)")
    msg = message(VETO, "suspend", 18)
    assert msg.summary == "Suspend refused by suspendguard"
    assert msg.body == ("pid 4242 (trainer) ignores SIGINT: the guard cannot stop it\n"
                        "1 more reason: sudo suspendguard history 18 "
                        "(or journalctl -u suspendguard@suspend.service)")
    # Attempt 0: the history could not record it, and `history 0` shows nothing: the journal.
    unrecorded = message(VETO, "suspend", 0)
    assert unrecorded.body.split("\n")[1] == (
        "1 more reason: journalctl -u suspendguard@suspend.service"), unrecorded.body
    text = message(Verdict("veto", (Reason("protected", "pid 1 (\x1b]0;pwned\x07) is held"),)),
                   "suspend").terminal_text(0.0)
    assert "\x1b" not in text and "pid 1 (?]0;pwned?) is held" in text
    assert text.startswith("\r\n\aMessage from suspendguard (") and text.endswith("\r\n")
    # Every line break but the body's own "\n", and what reorders or hides text, is '?' too:
    # a process name adds no line of its own to another user's terminal or desktop.
    breaks = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\u202e\u200b"
    forged = message(Verdict("veto", (Reason("protected", f"pid 9 x{breaks}root: reboot"),)),
                     "suspend")
    shown = f"pid 9 x{'?' * len(breaks)}root: reboot"
    details = "details: sudo suspendguard history (or journalctl -u suspendguard@suspend.service)"
    assert forged.body == f"{shown}\n{details}"
    assert forged.desktop_text().split("\n") == [shown, details]
    lines = forged.terminal_text(0.0).split("\r\n")
    assert lines[3:] == [f"Suspend refused by suspendguard: {shown}", details, "", ""], lines
    assert Message("S", f"a{breaks}b\nc").desktop_text() == f"a{'?' * len(breaks)}b\nc"


def test_the_terminal_banner_carries_the_zone() -> None:
    """Its time in the form every command shows one: a user on another zone reads it right."""
    text = Message("S", "b").terminal_text(0.0)
    assert text.split("\r\n")[1] == f"\aMessage from suspendguard ({when(0.0)}):"


def _config(**kw: Any) -> NotifyConfig:
    values = {"desktop": True, "wall": True, "users": (), "retry": False, "timeout_s": 3.0}
    return NotifyConfig(**{**values, **kw})


def _sessions(sessions: list[LoginSession]) -> Callable[[float], tuple[LoginSession, ...]]:
    return lambda _timeout: tuple(sessions)


def _desktop_session(name: str = "alice", uid: int = ME) -> LoginSession:
    return LoginSession("1", uid, name, "x11", "user", True, False, "active", "", ":0")


def _tell_desktop(bus: PrivateBus, config: NotifyConfig, until_s: float,
                  verdict: Verdict = VETO) -> tuple[str, float]:
    """alice's desktop told on ``bus``: what the log says, and how long it took."""
    out = io.StringIO()
    began = time.monotonic()
    tell(config, verdict, "suspend", Logger(out, {}), began + until_s, attempt=18,
         sessions=_sessions([_desktop_session()]), bus_address=lambda uid: bus.address)
    return out.getvalue(), time.monotonic() - began


@pytest.mark.root
def test_the_desktop_notification_is_sent_by_a_child_as_the_user(
        bus: PrivateBus, notifications: Callable[..., Path]) -> None:
    log_file = notifications()
    said, _ = _tell_desktop(bus, _config(wall=False), 10)
    sent = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert sent == [{
        "app_name": "suspendguard", "summary": "Suspend refused by suspendguard",
        "body": "pid 4242 (trainer) ignores SIGINT: the guard cannot stop it\n"
                "1 more reason: sudo suspendguard history 18 "
                "(or journalctl -u suspendguard@suspend.service)",
        "hints": {"urgency": 2}, "expire_timeout": -1, "actions": [],
    }]
    assert said == "suspendguard: notify: told alice's desktop\n"


@pytest.mark.root
@pytest.mark.parametrize(("caps", "shown"), [
    # A server that reads markup in the body (or cannot say): the name's markup is escaped.
    ("body,body-markup", "pid 9 (&lt;b&gt;a&amp;b&lt;/b&gt;) is protected\n"),
    ("none", "pid 9 (&lt;b&gt;a&amp;b&lt;/b&gt;) is protected\n"),
    # One that shows the body as written: escaped, its user would read "&lt;b&gt;".
    ("body", "pid 9 (<b>a&b</b>) is protected\n"),
])
def test_markup_in_a_reason_is_escaped_for_a_server_that_reads_markup(
        bus: PrivateBus, notifications: Callable[..., Path], caps: str, shown: str) -> None:
    log_file = notifications(caps=caps)
    verdict = Verdict("veto", (Reason("protected", "pid 9 (<b>a&b</b>) is protected"),))
    said, _ = _tell_desktop(bus, _config(wall=False), 10, verdict)
    assert said == "suspendguard: notify: told alice's desktop\n"
    body = json.loads(log_file.read_text())["body"]
    assert body.startswith(shown)


def test_a_session_bus_without_a_notification_server_is_named_as_the_session_bus(
        bus: PrivateBus) -> None:
    assert notify(bus.address, "suspendguard", "summary", "body", 5.0) == Unavailable(
        "the notification server: unavailable: org.freedesktop.Notifications is not on the "
        "session bus (org.freedesktop.DBus.Error.ServiceUnknown)")


@pytest.mark.root
def test_a_server_that_never_answers_costs_at_most_timeout_s(
        bus: PrivateBus, notifications: Callable[..., Path]) -> None:
    notifications(silent=True)
    said, took = _tell_desktop(bus, _config(wall=False, timeout_s=1.0), 60)
    assert took < 1.5, took
    lines = said.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("suspendguard: warning: notify: not told alice's desktop: ")
    assert "timed out" in lines[0] or "no answer within the timeout" in lines[0], lines[0]


@pytest.mark.root
def test_the_run_s_own_bound_wins_over_timeout_s(bus: PrivateBus,
                                                 notifications: Callable[..., Path]) -> None:
    notifications(silent=True)
    said, took = _tell_desktop(bus, _config(wall=False, timeout_s=30.0), 0.8)
    assert took < 1.3, took
    assert "warning: notify: not told alice's desktop" in said


@pytest.mark.root
def test_one_user_s_silent_desktop_does_not_cost_another_user_s_notification(
        bus: PrivateBus, notifications: Callable[..., Path]) -> None:
    """Each user's child has the whole bound: a first user whose notification server never
    answers (here: whose child hangs) leaves the next user's notification shown."""
    log_file = notifications()
    folder = Path(tempfile.mkdtemp(prefix="sg-python-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        python = folder / "python"
        python.write_text(f'#!/bin/sh\n[ "$(id -u)" = {ME} ] && exec {sys.executable} "$@"\n'
                          "exec sleep 30\n")
        python.chmod(0o755)
        nobody = pwd.getpwnam("nobody")
        hung = LoginSession("9", nobody.pw_uid, "nobody", "x11", "user", True, False, "active",
                            "", ":1")
        out = io.StringIO()
        began = time.monotonic()
        tell(_config(wall=False, timeout_s=2.0), VETO, "suspend", Logger(out, {}), began + 10,
             sessions=_sessions([hung, _desktop_session()]), python=str(python),
             bus_address=lambda uid: bus.address)
        took = time.monotonic() - began
    finally:
        shutil.rmtree(folder)
    said = out.getvalue()
    assert "notify: told alice's desktop" in said, said
    assert "not told nobody's desktop" in said, said
    assert len(log_file.read_text().splitlines()) == 1
    assert took < 2.5, took


def test_no_session_bus_and_no_logind_are_one_warning_each(tmp_path: Path,
                                                           no_bus: str) -> None:
    out = io.StringIO()
    # Told to no one: said so, for the veto unit not to keep the refusal as told.
    assert not tell(_config(wall=False), VETO, "suspend", Logger(out, {}), time.monotonic() + 5,
                    sessions=_sessions([_desktop_session()]),
                    bus_address=lambda uid: f"unix:path={tmp_path}/bus")
    assert out.getvalue() == (f"suspendguard: warning: notify: not told alice's desktop: "
                              f"no session bus ({tmp_path}/bus)\n")
    out = io.StringIO()
    assert not tell(_config(), VETO, "suspend", Logger(out, {}), time.monotonic() + 5)
    assert out.getvalue().startswith("suspendguard: warning: notify: told no one: logind: "
                                     "unavailable: no system bus at ")
    assert out.getvalue().count("\n") == 1


def test_timeout_zero_tells_no_one() -> None:
    out = io.StringIO()

    def never(_timeout: float) -> tuple[LoginSession, ...]:
        raise AssertionError("asked logind")

    assert not tell(_config(timeout_s=0.0), VETO, "suspend", Logger(out, {}),
                    time.monotonic() + 5, sessions=never)
    assert out.getvalue() == ""


def test_no_time_left_is_one_warning() -> None:
    """The unit's own limit passed before the telling began: no one told, and the log says
    why (a refusal that reached no one is not kept as told)."""
    out = io.StringIO()

    def never(_timeout: float) -> tuple[LoginSession, ...]:
        raise AssertionError("asked logind")

    assert not tell(_config(), VETO, "suspend", Logger(out, {}), time.monotonic() - 1,
                    sessions=never)
    assert out.getvalue() == ("suspendguard: warning: notify: told no one: no time left before "
                              "the unit's limit\n")


@pytest.mark.parametrize(("sessions", "config", "why"), [
    # A headless host: logind answers, and lists nobody (or only a greeter).
    ([], {}, "no active login session"),
    ([session("3", type="x11", **{"class": "greeter"}, name="lightdm")], {},
     "no active login session"),
    # [notify] users names nobody logged in.
    ([session("4", type="tty", tty="pts/3")], {"users": ("bob", "carol")},
     "no active login session of bob, carol ([notify] users)"),
    # Sessions of only the kind the configuration does not tell.
    ([session("1", type="x11", display=":0", seat="seat0")], {"desktop": False},
     "no text login session, and [notify] desktop = false"),
    ([session("4", type="tty", tty="pts/3")], {"wall": False},
     "no graphical login session, and [notify] wall = false"),
], ids=["nobody", "greeter-only", "users-not-logged-in", "desktop-off", "wall-off"])
def test_logind_listing_no_one_to_tell_is_one_warning(
        bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]],
        sessions: list[dict[str, Any]], config: dict[str, Any], why: str) -> None:
    fakes({"sessions": sessions}, services=["logind"])
    out = io.StringIO()
    assert not tell(_config(**config), VETO, "suspend", Logger(out, {}), time.monotonic() + 5,
                    bus_address=lambda uid: bus.address)
    assert out.getvalue() == f"suspendguard: warning: notify: told no one: {why}\n"


@contextlib.contextmanager
def _pty() -> Iterator[tuple[int, str]]:
    master, slave = pty.openpty()
    name = os.ttyname(slave)
    os.chmod(name, 0o620)  # mesg y
    try:
        yield master, name.removeprefix("/dev/")
    finally:
        os.close(slave)
        os.close(master)


@pytest.fixture
def terminal() -> Iterator[tuple[int, str]]:
    """A pseudo-terminal: its master fd, and its name as logind keeps it ("pts/N")."""
    with _pty() as opened:
        yield opened


@pytest.fixture
def vt() -> Iterator[tuple[int, str]]:
    """Another pseudo-terminal, standing for the VT a display server holds."""
    with _pty() as opened:
        yield opened


def _read(master: int) -> str:
    os.set_blocking(master, False)
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        data += chunk
    return data.decode()


def test_the_terminal_gets_the_message(terminal: tuple[int, str]) -> None:
    master, tty = terminal
    out = io.StringIO()
    tty_session = LoginSession("4", ME, "alice", "tty", "user", True, True, "active", tty, "")
    assert tell(_config(desktop=False), VETO, "suspend", Logger(out, {}), time.monotonic() + 5,
                attempt=18, sessions=_sessions([tty_session]))
    assert out.getvalue() == f"suspendguard: notify: told alice on /dev/{tty}\n"
    seen = _read(master)
    assert "Message from suspendguard" in seen
    assert ("Suspend refused by suspendguard: pid 4242 (trainer) ignores SIGINT: the guard "
            "cannot stop it") in seen
    assert "1 more reason: sudo suspendguard history 18 " in seen


def test_mesg_n_another_owner_and_odd_names_are_left_alone(terminal: tuple[int, str]) -> None:
    master, tty = terminal
    until = time.monotonic() + 5
    assert write_terminal(tty, (ME + 1,), "x", until) == (
        f"/dev/{tty}: owned by uid {ME}, not by the session's user (uid {ME + 1})")
    os.chmod(f"/dev/{tty}", 0o600)
    assert write_terminal(tty, (ME,), "x", until) == f"/dev/{tty}: messages refused (mesg n)"
    for name in ("../etc/passwd", "tty", "pts/../../etc/shadow", "null", "console"):
        assert "is not a terminal name" in str(write_terminal(name, (ME,), "x", until))
    assert _read(master) == ""


@pytest.mark.root
def test_a_stopped_terminal_does_not_cost_the_desktops_their_notification(
        bus: PrivateBus, notifications: Callable[..., Path],
        terminal: tuple[int, str]) -> None:
    """An ssh session whose terminal takes no output (^S, a stalled connection) loses its
    message; the desktop user is still told, within the same bound."""
    log_file = notifications()
    _master, tty = terminal
    slave = os.open(f"/dev/{tty}", os.O_RDWR | os.O_NOCTTY)
    try:
        termios.tcflow(slave, termios.TCOOFF)  # ^S: the terminal takes no more output
        stuck = LoginSession("4", ME, "carol", "tty", "user", True, True, "active", tty, "")
        out = io.StringIO()
        began = time.monotonic()
        tell(_config(timeout_s=2.0), VETO, "suspend", Logger(out, {}), began + 10,
             sessions=_sessions([stuck, _desktop_session()]),
             bus_address=lambda uid: bus.address)
        took = time.monotonic() - began
    finally:
        termios.tcflow(slave, termios.TCOON)
        os.close(slave)
    said = out.getvalue()
    assert "notify: told alice's desktop" in said, said
    assert f"not told carol on /dev/{tty}: /dev/{tty}: takes no more output" in said, said
    assert len(log_file.read_text().splitlines()) == 1
    assert took < 2.5, took


def test_notify_keys_are_validated() -> None:
    c = defaults()
    assert c.notify == _config()
    good = build({"notify": {"users": ["alice", "svc-1", "machine$"], "timeout_s": 0.5,
                             "retry": True}})
    assert good.notify.users == ("alice", "svc-1", "machine$") and good.notify.retry
    for bad, said in (
        ({"users": "alice"}, "[notify] users: expected a list of strings"),
        ({"users": ["al ice"]}, "[notify] users: expected user names"),
        ({"users": [""]}, "[notify] users: expected user names"),
        ({"desktop": "yes"}, "[notify] desktop: expected true or false"),
        ({"timeout_s": -1}, "[notify] timeout_s: expected a number from 0 to 86400, got -1"),
        ({"colour": True}, "[notify] colour: unknown key"),
    ):
        with pytest.raises(ConfigError) as raised:
            build({"notify": bad})
        assert said in str(raised.value), (bad, str(raised.value))


@pytest.mark.root
def test_stopped_terminals_cost_no_desktop_its_time(
        bus: PrivateBus, notifications: Callable[..., Path]) -> None:
    """Each stopped terminal takes its 0.25 s: the desktops' children run meanwhile, so five
    of them (1.25 s of a 1.5 s bound) still leave the desktop user told."""
    log_file = notifications()
    opened: list[int] = []
    stuck: list[LoginSession] = []
    try:
        for n in range(5):
            master, slave = pty.openpty()
            opened += [master, slave]
            name = os.ttyname(slave)
            os.chmod(name, 0o620)
            termios.tcflow(slave, termios.TCOOFF)
            stuck.append(LoginSession(str(10 + n), ME, "carol", "tty", "user", True, True,
                                      "active", name.removeprefix("/dev/"), ""))
        out = io.StringIO()
        began = time.monotonic()
        tell(_config(timeout_s=1.5), VETO, "suspend", Logger(out, {}), began + 10,
             sessions=_sessions([*stuck, _desktop_session()]),
             bus_address=lambda uid: bus.address)
        took = time.monotonic() - began
    finally:
        for fd in opened[1::2]:
            termios.tcflow(fd, termios.TCOON)
        for fd in opened:
            os.close(fd)
    said = out.getvalue()
    assert "notify: told alice's desktop" in said, said
    assert said.count("takes no more output") == 5, said
    assert len(log_file.read_text().splitlines()) == 1
    assert took < 2.0, took


@pytest.mark.root
def test_a_nul_in_a_reason_costs_nobody_their_message(
        bus: PrivateBus, notifications: Callable[..., Path], terminal: tuple[int, str]) -> None:
    """A reason's words may come from a tool's output: a NUL in them cannot be a child's
    argument (nor a D-Bus string). It becomes '?', as on a terminal, and everyone is told."""
    log_file = notifications()
    master, tty = terminal
    verdict = Verdict("veto", (Reason("device-unknown", "npu-smi said \x00\x1b[2J garbage"),))
    out = io.StringIO()
    tell(_config(), verdict, "suspend", Logger(out, {}), time.monotonic() + 10,
         sessions=_sessions([LoginSession("4", ME, "alice", "tty", "user", True, True, "active",
                                          tty, ""), _desktop_session()]),
         bus_address=lambda uid: bus.address)
    assert out.getvalue() == (f"suspendguard: notify: told alice on /dev/{tty}, "
                              "alice's desktop\n")
    body = json.loads(log_file.read_text())["body"]
    assert body.startswith("npu-smi said ??[2J garbage\n")
    assert "npu-smi said ??[2J garbage" in _read(master)


def test_a_graphical_session_s_terminal_is_not_one_to_write(
        bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]]) -> None:
    """logind gives a graphical session the VT its display server holds as its TTY (GDM's
    wayland session tty2, an X session tty7): no one reads text there. Only text sessions,
    a console or an ssh login with a pty, are written."""
    fakes({"sessions": [
        session("2", type="wayland", tty="tty2", seat="seat0"),
        session("3", type="x11", tty="tty7", display=":0", seat="seat0", name="bob",
                uid=ME + 2),
        session("4", type="tty", tty="tty3", seat="seat0"),
        session("5", type="tty", tty="pts/2", remote=True, name="bob", uid=ME + 2),
        session("6", type="wayland", tty="tty4", active=False, seat="seat0", name="carol",
                uid=ME + 3),
    ]}, services=["logind"])
    found = list_sessions(address=bus.address)
    assert isinstance(found, tuple), found
    assert found[0].tty == "tty2" and found[1].display == ":0"
    terminals, desktops = told_sessions(found, ())
    assert [t.tty for t in terminals] == ["tty3", "pts/2"]
    assert [s.id for s in desktops] == ["2", "3"]


@pytest.mark.root
def test_a_graphical_session_gets_its_notification_and_nothing_on_its_terminal(
        bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]],
        notifications: Callable[..., Path], terminal: tuple[int, str],
        vt: tuple[int, str]) -> None:
    """Sessions as logind tells them over the bus: alice's wayland session on a VT (here a
    pseudo-terminal of hers, open to messages) is told on the desktop only; her ssh login
    on the other terminal gets the message there."""
    log_file = notifications()
    master, tty = terminal
    vt_master, vt_tty = vt
    fakes({"sessions": [session("2", type="wayland", tty=vt_tty, seat="seat0"),
                        session("4", type="tty", tty=tty, remote=True)]}, services=["logind"])
    out = io.StringIO()
    tell(_config(), VETO, "suspend", Logger(out, {}), time.monotonic() + 10,
         bus_address=lambda uid: bus.address)
    assert out.getvalue() == f"suspendguard: notify: told alice on /dev/{tty}, alice's desktop\n"
    assert _read(vt_master) == ""
    assert _read(master).count("Message from suspendguard") == 1
    assert len(log_file.read_text().splitlines()) == 1


@pytest.mark.parametrize("first", ["alice", "bob"])
def test_two_users_sessions_on_one_terminal_get_one_message_naming_both(
        bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]],
        terminal: tuple[int, str], first: str) -> None:
    """logind lists alice's and bob's sessions on one terminal, alice's: it is written once,
    checked against the user who owns it whichever session comes first, and the log names
    both users."""
    master, tty = terminal
    alice = session("4", type="tty", tty=tty)
    bob = session("5", type="tty", tty=tty, name="bob", uid=ME + 1)
    listed = [alice, bob] if first == "alice" else [bob, alice]
    fakes({"sessions": listed}, services=["logind"])
    out = io.StringIO()
    tell(_config(desktop=False), VETO, "suspend", Logger(out, {}), time.monotonic() + 5)
    names = " and ".join(s["name"] for s in listed)
    assert out.getvalue() == f"suspendguard: notify: told {names} on /dev/{tty}\n"
    assert _read(master).count("Message from suspendguard") == 1


@pytest.mark.parametrize(("mode", "users", "why"), [
    (0o600, [("alice", ME), ("bob", ME + 1)], "messages refused (mesg n)"),
    (0o620, [("bob", ME + 1), ("carol", ME + 2)],
     f"owned by uid {ME}, not by a user of its sessions (uids {ME + 1}, {ME + 2})"),
], ids=["mesg-n", "owned-by-neither"])
def test_a_terminal_of_two_users_not_written_is_one_warning_naming_both(
        bus: PrivateBus, fakes: Callable[..., subprocess.Popen[str]],
        terminal: tuple[int, str], mode: int, users: list[tuple[str, int]], why: str) -> None:
    master, tty = terminal
    os.chmod(f"/dev/{tty}", mode)
    fakes({"sessions": [session(str(n), type="tty", tty=tty, name=name, uid=uid)
                        for n, (name, uid) in enumerate(users, 4)]}, services=["logind"])
    out = io.StringIO()
    tell(_config(desktop=False), VETO, "suspend", Logger(out, {}), time.monotonic() + 5)
    names = " and ".join(name for name, _ in users)
    assert out.getvalue() == (f"suspendguard: warning: notify: not told {names} on /dev/{tty}: "
                              f"/dev/{tty}: {why}\n")
    assert _read(master) == ""
