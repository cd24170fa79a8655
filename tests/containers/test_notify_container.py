"""A vetoed ``systemctl suspend`` is told to its users, inside a booted systemd with logind.

Two lingering users log in through PAM (``su -l``, whose session pam_systemd
registers with the container's real logind):

- sgdesk's session is started with ``XDG_SESSION_TYPE=x11``, which
  pam_systemd hands logind as the session's type, so logind itself calls it
  an active graphical session. There is no display manager or seat in the
  container; the X server is Xvfb, run in that session, and on it dunst,
  Debian's notification daemon, owns org.freedesktop.Notifications on the
  user's session bus (dbus-user-session's socket of the user's manager).
- sgterm's session runs on a pseudo-terminal that script(1) holds and logs;
  the terminal is given to the user as login(1) would (chown, mode 620:
  mesg y), since su leaves it root's.

The desktop notification is sent by a child the guard runs as the user
with its own interpreter, which the users must be able to run: the test's
interpreter lies where the test host put it (under /root, say), so the
container's own folders on the way to it (the tmpfs that --volatile=yes
makes, not the host's folders) are opened for search, as the folders of a
system python3 in /usr are.

A holder that ignores SIGINT makes the guard veto; the test then reads the
notification back from dunst's history and the message from the terminal.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

import pytest
from helpers.systemd_harness import HOLDER, Boot, Container, container_marks, guard_config
from helpers.wait import wait_for

pytestmark = container_marks()

NODE = "/dev/suspendguard-notify/accel0"
MARKER = "/run/suspendguard-test/notify-signals.log"
DESK, DESK_UID = "sgdesk", 4301
TERM, TERM_UID = "sgterm", 4302
TTY_LOG = "/run/sg-notify-tty.log"
# su -l's PAM service: root needs no password, the session is logind's.
PAM_SU_L = """auth sufficient pam_rootok.so
account required pam_permit.so
session required pam_permit.so
session required pam_systemd.so
"""
DESKTOP = (f"export DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/{DESK_UID}/bus; "
           "Xvfb :42 -nolisten tcp & "
           "while [ ! -e /tmp/.X11-unix/X42 ]; do sleep 0.1; done; "
           "DISPLAY=:42 exec dunst")
TERMINAL = (f'chown {TERM} "$(tty)" && chmod 620 "$(tty)" && '
            f"exec su -l {TERM} -c 'echo sg-tty-ready; exec sleep 600'")

# Every folder on the way to the interpreter that lies on the container's own
# root (its tmpfs: the same device as /), never a folder bound from the host: o+x.
OPEN_PATH = """root=$(stat -c %d /)
d=$(dirname "$(readlink -f "$1")")
while [ "$d" != / ]; do
    [ "$(stat -c %d "$d")" != "$root" ] || chmod o+x "$d"
    d=$(dirname "$d")
done"""


@pytest.fixture(scope="module")
def box(boot: Boot) -> Container:
    box = boot(NODE, "1 7", "/run/suspendguard-test", config=guard_config(NODE))
    box.write("/etc/pam.d/su-l", PAM_SU_L)
    box.lingering_user(DESK, DESK_UID)
    box.lingering_user(TERM, TERM_UID)
    box.run("sh", "-c", OPEN_PATH, "sh", sys.executable)
    return box


def _until(what: str, check: Any, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} within {timeout:g} s")
        time.sleep(0.2)


def _dunst(box: Container, *args: str) -> Any:
    return box.as_user(DESK_UID, "env", f"DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/"
                       f"{DESK_UID}/bus", "dunstctl", *args, check=False)


def _sessions(box: Container) -> str:
    return box.run(sys.executable, "-c", "from suspendguard.system.dbus.logind import "
                   "list_sessions; print(list_sessions())").stdout


def test_a_veto_reaches_the_desktop_and_the_terminal(box: Container) -> None:
    units = ("sg-notify-desktop.service", "sg-notify-tty.service")
    box.jobs.extend(units)  # stopped with the holder
    with box.cleaned(MARKER, TTY_LOG):
        box.run("systemd-run", f"--unit={units[0]}", "--service-type=simple",
                "-E", "XDG_SESSION_TYPE=x11", "--", "su", "-l", DESK, "-c", DESKTOP)
        box.run("systemd-run", f"--unit={units[1]}", "--service-type=simple", "--",
                "sh", "-c", f'sleep 600 | script -qfc "$1" {TTY_LOG}', "sh", TERMINAL)
        _until("dunst answers on sgdesk's bus", lambda: _dunst(box, "is-paused").returncode == 0)
        _until("sgterm's terminal is ready", lambda: "sg-tty-ready" in box.run(
            "cat", TTY_LOG, check=False).stdout)
        seen = _sessions(box)
        # logind's own view: sgdesk active on x11, sgterm on a pseudo-terminal.
        assert re.search(rf"name='{DESK}', type='x11', session_class='user', active=True", seen), seen
        assert re.search(rf"name='{TERM}', type='tty', .*tty='pts/\d+'", seen), seen
        pid = box.start_holder("notify-deaf", "deaf", node=NODE, marker=MARKER)
        journal = box.suspend()
        assert "Dependency failed" in journal, journal[-3000:]
        assert re.search(rf"notify: told {TERM} on /dev/pts/\d+, {DESK}'s desktop", journal), \
            "\n".join(x for x in journal.splitlines() if "suspendguard[" in x)
        assert box.power_state() == "freeze mem disk\n"  # it never slept
        _dunst(box, "close-all")  # dunst's history holds the notifications closed
        history: list[dict[str, Any]] = []

        def in_history() -> bool:
            got = _dunst(box, "history")
            history[:] = json.loads(got.stdout)["data"][0] if got.returncode == 0 else []
            return bool(history)

        _until("the notification is in dunst's history", in_history, timeout=5)
        tty_text = box.run("cat", TTY_LOG).stdout
        for name in (*units, "suspendguard@suspend.service"):
            box.run("systemctl", "reset-failed", name, check=False)
    (shown,) = history
    assert shown["appname"]["data"] == "suspendguard"
    assert shown["summary"]["data"] == "Suspend refused by suspendguard"
    body = shown["body"]["data"]
    assert f"pid {pid} " in body and "SIGINT" in body, body
    # Where the whole refusal is, for a user who is not root: this attempt's history.
    attempt = json.loads(box.suspendguard("history", "--json", "-n", "1").stdout)["attempts"][0]
    assert body.endswith(f": sudo suspendguard history {attempt['id']} (or journalctl -u "
                         "suspendguard@suspend.service)"), body
    assert shown["timeout"]["data"] == 0  # critical: dunst keeps it until it is closed
    assert "Message from suspendguard" in tty_text, tty_text
    line = next(x for x in tty_text.splitlines() if "Suspend refused by suspendguard: " in x)
    assert f"pid {pid} " in line and "SIGINT" in line, line


def test_a_veto_whose_cause_passes_starts_the_retry_unit(box: Container) -> None:
    """``[notify] retry``: the veto unit starts the retry unit for real (a transient unit of
    the container's systemd). It waits for the job still running after SIGINT; while logind
    still wants the sleep (nobody has used the container since the veto: logind's idle
    hint) it asks for the suspend again, which the guard now allows, and the machine
    sleeps; else it asks for nothing."""
    retry_unit = "suspendguard-retry-suspend.service"
    config = guard_config(NODE)
    box.write("/etc/suspendguard/config.toml",
              config + "\n[notify]\nretry = true\ndesktop = false\nwall = false\n")
    try:
        with box.cleaned(MARKER):
            # SIGINT ends it 8 s later: past the guard's 5 s wait, a cause that passes.
            box.start_job("sg-test-notify-late.service", [
                box.python, HOLDER, "--node", NODE, "--mode", "graceful", "--delay", "8",
                "--marker", MARKER])
            journal = box.suspend()
            assert "Dependency failed" in journal, journal[-3000:]
            assert f"{retry_unit} will ask for the suspend again" in journal, \
                "\n".join(x for x in journal.splitlines() if "suspendguard[" in x)
            assert box.power_state() == "freeze mem disk\n"  # the veto: it did not sleep

            def ended() -> bool:
                state = box.run("systemctl", "show", "-p", "ActiveState", "--value", retry_unit,
                                check=False).stdout.strip()
                return state in ("inactive", "failed", "")

            assert wait_for(ended, 40.0, interval=0.5)
            said = box.run("journalctl", "-u", retry_unit, "-o", "cat", "--no-pager").stdout
            assert "retry: waiting for pid " in said and "still running after SIGINT" in said, said
            # Whether logind still wants the sleep is its idle hint here (no lid): nobody has
            # used the container since the veto, unless the sessions of the test before left
            # logind not idle. Each answer has its own end.
            idle = box.run("busctl", "get-property", "org.freedesktop.login1",
                           "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                           "IdleHint").stdout.strip()
            if idle == "b true":
                assert "retried: the suspend went ahead (try 1)" in said, said
                assert box.power_state().startswith("mem"), said  # asked again, and it slept
            else:
                assert "no retry: logind no longer wants to sleep" in said, (idle, said)
                assert box.power_state() == "freeze mem disk\n", said
            assert box.run("cat", MARKER).stdout.count("SIGINT") == 1  # the retry sent none
            box.run("systemctl", "reset-failed", "suspendguard@suspend.service", check=False)
    finally:
        box.write("/etc/suspendguard/config.toml", config)
