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


# Asked in a child: a connect that blocks for ever would hold the test itself.
ASK = """
import sys
from suspendguard.system.dbus.bus import converse
async def body(session):
    return "asked"
print(converse("a manager", 1.0, body, "unix:path=" + sys.argv[1], "system bus"))
"""


def test_a_socket_that_never_accepts_is_no_answer_within_the_timeout(tmp_path: Path) -> None:
    """A listener whose backlog is full holds a blocking connect: bounded, not for ever."""
    path = tmp_path / "private"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as filler:
        server.bind(str(path))
        server.listen(0)
        filler.setblocking(False)
        filler.connect(str(path))  # the one place in its backlog, never accepted
        asked = subprocess.run([sys.executable, "-c", ASK, str(path)], capture_output=True,
                               text=True, timeout=30)
    # Linux answers a connect to a full backlog at once where it may not block (EAGAIN)
    assert asked.stdout == (f"Unavailable(reason='a manager: unavailable: cannot connect to the "
                            f"system bus at unix:path={path} (Resource temporarily "
                            "unavailable)')\n"), asked.stderr
