"""Who answers at a manager's private socket: the owner of its runtime folder, or nobody.

A user owns /run/user/UID and may put there, in place of its manager's socket, a link to
PID 1's: root's guard would then start the user's unit names on the system manager.
Real sockets, served by this process (root) in folders of the test's own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import Session, converse
from suspendguard.system.dbus.peer import stranger

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another owner needs root")

NOBODY = 65534


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[Path, socket.socket]]:
    """/run/user/UID as logind makes it, its systemd/private served by root (this process)."""
    folder = tmp_path / "user" / str(NOBODY)
    (folder / "systemd").mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "systemd" / "private"))
    server.listen(4)
    try:
        yield folder, server
    finally:
        server.close()


def address(folder: Path) -> str:
    return f"unix:path={folder}/systemd/private"


def test_a_socket_answered_by_another_user_than_the_folder_s_owner_is_a_stranger(
        runtime: tuple[Path, socket.socket]) -> None:
    folder, _ = runtime
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(folder / "systemd" / "private"))
        assert stranger(client, address(folder)) is None  # root's folder, root answers
        os.chown(folder, NOBODY, NOBODY)
        assert stranger(client, address(folder)) == (
            f"is answered by pid {os.getpid()} as uid 0, not by {folder}'s owner "
            f"(uid {NOBODY})")


def test_the_guard_asks_nothing_of_a_stranger(runtime: tuple[Path, socket.socket]) -> None:
    folder, _ = runtime
    os.chown(folder, NOBODY, NOBODY)
    asked = []

    async def body(session: Session) -> str:
        asked.append(session)
        return "asked"

    answer = converse("uid 65534's manager", 5.0, body, address(folder),
                      "systemd private socket")
    assert isinstance(answer, Unavailable) and not asked, answer
    assert answer.reason == (
        f"uid 65534's manager: unavailable: the systemd private socket at {address(folder)} "
        f"is answered by pid {os.getpid()} as uid 0, not by {folder}'s owner (uid {NOBODY}): "
        "refused")


# Asked in a child: a connect that blocks for ever would hold the test itself. It prints
# the answer and how long it took.
ASK = """
import sys, time
from suspendguard.system.dbus.bus import converse
async def body(session):
    return "asked"
begun = time.monotonic()
print(converse("a manager", 1.0, body, "unix:path=" + sys.argv[1], "system bus"))
print(round(time.monotonic() - begun, 1))
"""


def full_backlog(path: Path) -> tuple[socket.socket, socket.socket]:
    """A listener that never accepts, and the connection that fills its backlog (listen(0))."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    filler.setblocking(False)
    filler.connect(str(path))
    return server, filler


def test_a_socket_that_never_accepts_is_no_answer_within_the_timeout(tmp_path: Path) -> None:
    """A listener whose backlog stays full held a blocking connect: bounded, not for ever.
    Linux answers such a connect at once where it may not block (EAGAIN): it is tried
    again until the conversation's time is up."""
    path = tmp_path / "private"
    server, filler = full_backlog(path)
    with server, filler:
        asked = subprocess.run([sys.executable, "-c", ASK, str(path)], capture_output=True,
                               text=True, timeout=30)
    answer, took = asked.stdout.splitlines()
    assert answer == (f"Unavailable(reason='a manager: unavailable: cannot connect to the "
                      f"system bus at unix:path={path} (Resource temporarily unavailable)')"), \
        asked.stderr
    assert 0.9 <= float(took) < 10, took


def test_a_backlog_full_for_a_moment_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "private"
    server, filler = full_backlog(path)
    with server, filler:
        child = subprocess.Popen([sys.executable, "-c", ASK, str(path)], text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.3)
        server.accept()[0].close()  # the filler's place freed: the guard's connect goes in
        out, err = child.communicate(timeout=30)
    # It connected: what ends the conversation is this listener not speaking D-Bus.
    assert "cannot connect" not in out, out + err
