"""A refusal told once, not at each of logind's asks; one told to nobody is told at the next
(store/told.py, guard/run.py).

The sessions are a fake logind's on a private bus, the terminal a real pseudo-terminal that
the test reads.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, nullcontext
from pathlib import Path

import pytest
from helpers.dbus import PrivateBus, dbus_daemon, fake_service

from suspendguard.config import build
from suspendguard.guard.run import tell_refused
from suspendguard.store import told
from suspendguard.system.log import Logger
from suspendguard.verdict import Reason, Verdict

pytestmark = pytest.mark.skipif(dbus_daemon() is None, reason="dbus-daemon is not installed")

TOLD = "Suspend refused by suspendguard"


def busy(device: str, pct: int) -> Verdict:
    return Verdict("veto", (Reason("device-busy", f"{device} (npu-smi): aicore {pct}% > 5% "
                                   "after 3.0 s settle", device=device),))


class Terminal:
    """alice's text session on a real pseudo-terminal (mesg y), as a fake logind has it."""

    def __init__(self, bus: PrivateBus) -> None:
        self.bus = bus
        self.master, self.slave = pty.openpty()
        name = os.ttyname(self.slave)
        os.chmod(name, 0o620)
        self.sessions = [{"id": "4", "uid": os.getuid(), "name": "alice", "type": "tty",
                          "tty": name.removeprefix("/dev/")}]

    def logind(self, logged_in: bool = True) -> AbstractContextManager[subprocess.Popen[str]]:
        """logind while the block runs, alice logged in or nobody."""
        return fake_service(self.bus, {"sessions": self.sessions if logged_in else []},
                            services=["logind"])

    def read(self) -> str:
        os.set_blocking(self.master, False)
        try:
            return os.read(self.master, 65536).decode()
        except BlockingIOError:
            return ""


    def close(self) -> None:
        os.close(self.slave)
        os.close(self.master)


@pytest.fixture
def terminal(bus: PrivateBus) -> Iterator[Terminal]:
    with closing(Terminal(bus)) as t:
        yield t


def tell(state: Path, verdict: Verdict, users: tuple[str, ...] = ()) -> str:
    """One veto unit's telling of ``verdict``: its log."""
    config = build({"state": {"dir": str(state)}, "notify": {"desktop": False,
                                                            "users": list(users)}})
    log = io.StringIO()
    tell_refused(config, verdict, "suspend", Logger(log, {}), time.monotonic(), 18)
    return log.getvalue()


def told_again(state: Path, terminal: Terminal, *verdicts: Verdict) -> list[bool]:
    """For each refusal in turn, whether it reached alice's terminal."""
    out = []
    with terminal.logind():
        for verdict in verdicts:
            tell(state, verdict)
            out.append(TOLD in terminal.read())
    return out


def test_a_refusal_whose_figures_changed_is_told_once(tmp_path: Path, terminal: Terminal) -> None:
    # With the lid closed logind asks every 30 s; the busy device's load is new at each ask.
    assert told_again(tmp_path, terminal, busy("npu 0", 37), busy("npu 0", 41)) == [True, False]


def test_a_refusal_about_another_device_is_told(tmp_path: Path, terminal: Terminal) -> None:
    assert told_again(tmp_path, terminal, busy("npu 0", 37), busy("npu 1", 37)) == [True, True]


def test_a_reason_about_nothing_in_particular_is_known_by_its_words(
        tmp_path: Path, terminal: Terminal) -> None:
    failed = Verdict("unknown", (Reason("guard-failed", "the guard failed: disk full"),))
    other = Verdict("unknown", (Reason("guard-failed", "the guard failed: out of memory"),))
    assert told_again(tmp_path, terminal, failed, failed, other) == [True, False, True]


@pytest.mark.parametrize("first", ["no logind", "nobody logged in"])
def test_a_refusal_told_to_nobody_is_told_at_the_next_ask(
        tmp_path: Path, terminal: Terminal, first: str) -> None:
    # An admin who logs in by ssh after the first ask and runs `systemctl suspend` again.
    with nullcontext() if first == "no logind" else terminal.logind(logged_in=False):
        said = tell(tmp_path, busy("npu 0", 37))
    assert "notify: told no one: " in said or said == "", said
    assert not (tmp_path / told.TOLD_NAME).exists()
    with terminal.logind():
        said = tell(tmp_path, busy("npu 0", 41))
    assert TOLD in terminal.read(), said
    assert said.startswith("suspendguard: notify: told alice on /dev/"), said


def test_a_refusal_told_to_nobody_leaves_the_one_told_before_as_told(
        tmp_path: Path, terminal: Terminal) -> None:
    with terminal.logind():
        tell(tmp_path, busy("npu 0", 37))
        assert TOLD in terminal.read()
        # [notify] users names nobody logged in: npu 1's refusal reaches no one.
        said = tell(tmp_path, busy("npu 1", 37), users=("bob",))
        assert terminal.read() == "" and "told no one: no active login session of bob" in said, said
        # npu 0's, told a moment ago, is still not told again.
        said = tell(tmp_path, busy("npu 0", 41))
    assert terminal.read() == "" and "not told again" in said, said


def test_a_note_taken_back_leaves_another_runs_note(tmp_path: Path) -> None:
    mine = told.first_time(str(tmp_path), "suspend\ndevice-busy npu 0", now=1000.0)
    assert mine is not None and mine.before is None
    theirs = told.first_time(str(tmp_path), "hibernate\ndevice-busy npu 0", now=1001.0)
    assert theirs is not None
    told.untold(mine)
    kept = json.loads((tmp_path / told.TOLD_NAME).read_text())
    assert kept == {"words": "hibernate\ndevice-busy npu 0", "time": 1001.0}
    told.untold(theirs)  # the file back as it was before it: mine, as written then
    assert json.loads((tmp_path / told.TOLD_NAME).read_text())["time"] == 1000.0
