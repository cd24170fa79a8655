"""Who is told of a refused sleep, what they are told, and within which bound.

The veto unit's run calls :func:`tell` once its verdict is logged, for a
refused (veto or unknown) real sleep only. Every user with an active login
session (or those of ``[notify] users``) is told on the terminal of each text
session, once a terminal (notify/terminals.py), and, for each active
graphical session (never on its terminal: a VT no one reads), by a desktop
notification on the user's session bus, sent by a child run as the user
(notify/send.py), the users' children at once: dbus-daemon admits no root
connection to a user's bus.

All of it ends by ``until`` and within ``[notify] timeout_s``: a child that
gets no answer is killed there (system/runner.py), and what was not told
is one warning line in the log.
"""

from __future__ import annotations

import os
import pwd
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from suspendguard.config.schema import NotifyConfig
from suspendguard.model import Unavailable
from suspendguard.notify.terminals import write_terminal
from suspendguard.system import runner
from suspendguard.system.dbus.logind import LoginSession, list_sessions
from suspendguard.system.dbus.notifications import session_bus_address
from suspendguard.system.log import Logger
from suspendguard.system.terminal import when
from suspendguard.verdict import Verdict

# How much sooner than its own kill the child gives up on the server, to say why.
CHILD_MARGIN_S = 0.3
# Desktop notifications sent at once, each by its own child.
MAX_CHILDREN = 16
# How long one terminal may refuse output (^S, a stalled ssh connection) before its message
# is cut: a live one takes the few hundred bytes at once, and a stuck one must not spend the
# bound of the desktops and terminals told after it.
TERMINAL_S = 0.25


@dataclass(frozen=True, slots=True)
class Message:
    summary: str
    body: str

    def terminal_text(self, at: float) -> str:
        """As wall writes it: a bell, a banner (its time with the zone, as every command shows
        one), CR LF line ends (a raw terminal needs the CR)."""
        first, *rest = self._lines()
        lines = ["", f"\aMessage from suspendguard ({when(at)}):", "",
                 f"{self.summary}: {first}", *rest, ""]
        return "\r\n".join(lines) + "\r\n"

    def desktop_text(self) -> str:
        """The body, its lines kept and control characters '?' like a terminal's: a NUL
        cannot travel as the child's argument nor as a D-Bus string."""
        return "\n".join(self._lines())

    def _lines(self) -> list[str]:
        # Split on "\n" only: splitlines() would honour \r, \v, \x1c, \x85, \u2028 ... from
        # a reason's text as line breaks, and a process name could add lines of its own.
        return [_printable(line) for line in self.body.split("\n")]


def message(verdict: Verdict, action: str, attempt: int | None = None) -> Message:
    """The summary and body: the first reason's words, and where the whole refusal is.

    The users told are seldom root, and the history is root's alone: the body
    names the attempt (``attempt``; None: the history lists it first; 0: the history
    could not record it, so the journal alone) for ``sudo``, and the veto unit's journal,
    whose line has every reason.
    """
    # The reason's text made printable before it is joined: its line breaks are not the
    # body's (a process name is its owner's to choose).
    first = _printable(verdict.reasons[0].text) if verdict.reasons else "the guard could not tell"
    more = len(verdict.reasons) - 1
    journal = f"journalctl -u suspendguard@{action}.service"
    if attempt == 0:
        # Ids start at 1: 0 is an attempt the history could not record, which neither
        # `history 0` nor `history` (it lists another attempt first) shows.
        where = journal
    else:
        one = f" {attempt}" if attempt is not None else ""
        where = f"sudo suspendguard history{one} (or {journal})"
    rest = f"{more} more reason{'s' if more > 1 else ''}: {where}" if more else f"details: {where}"
    return Message(f"{action.capitalize()} refused by suspendguard", f"{first}\n{rest}")


@dataclass(frozen=True, slots=True)
class Terminal:
    """One terminal, written once, and the text sessions that name it: two users' sessions
    may name one terminal, and each user is named in the log."""

    tty: str
    sessions: tuple[LoginSession, ...]

    @property
    def uids(self) -> tuple[int, ...]:
        """The users of its sessions: the one who owns the terminal has it written."""
        return tuple(dict.fromkeys(s.uid for s in self.sessions))

    @property
    def who(self) -> str:
        return " and ".join(dict.fromkeys(s.name for s in self.sessions)) + f" on /dev/{self.tty}"


def told_sessions(sessions: Sequence[LoginSession], users: Sequence[str]
                  ) -> tuple[tuple[Terminal, ...], tuple[LoginSession, ...]]:
    """The terminals of text sessions, each once, and one graphical session per user told
    on the desktop: live sessions of ``users`` (empty: of every user)."""
    live = [s for s in sessions if s.state != "closing" and (not users or s.name in users)]
    terminals: dict[str, list[LoginSession]] = {}
    desktops: dict[int, LoginSession] = {}
    for s in live:
        if s.text:
            terminals.setdefault(s.tty, []).append(s)
        if s.graphical:
            desktops.setdefault(s.uid, s)
    return (tuple(Terminal(tty, tuple(on)) for tty, on in terminals.items()),
            tuple(desktops.values()))


Sessions = Callable[[float], "tuple[LoginSession, ...] | Unavailable"]


def tell(config: NotifyConfig, verdict: Verdict, action: str, log: Logger, until: float, *,
         attempt: int | None = None,
         sessions: Sessions = lambda timeout: list_sessions(timeout),
         python: str = sys.executable,
         bus_address: Callable[[int], str] = session_bus_address) -> bool:
    """Tell the users of the refused ``action`` (the history's ``attempt``); whether anyone
    was told (a terminal written, a notification shown). Never raises, never waits past
    the bound.

    ``sessions``, ``python`` and ``bus_address`` (a uid's session bus) are
    logind's sessions, this interpreter and /run/user/UID/bus but in tests.
    """
    try:
        return _tell(config, message(verdict, action, attempt), log, until, sessions, python,
                     bus_address)
    except Exception as exc:  # the telling is never worth a traceback in the sleep path
        log.warning(f"notify: not told: {type(exc).__name__}: {exc}")
        return False


def _tell(config: NotifyConfig, msg: Message, log: Logger, until: float,
          sessions: Sessions, python: str, bus_address: Callable[[int], str]) -> bool:
    start = time.monotonic()
    if config.timeout_s <= 0 or not (config.desktop or config.wall):
        return False  # the configuration tells no one: nothing to warn of
    end = min(until, start + config.timeout_s)
    if end <= start:
        log.warning("notify: told no one: no time left before the unit's limit")
        return False
    found = sessions(end - start)
    if isinstance(found, Unavailable):
        log.warning(f"notify: told no one: {found.reason}")
        return False
    terminals, desktops = told_sessions(found, config.users)
    if not ((config.wall and terminals) or (config.desktop and desktops)):
        log.warning(f"notify: told no one: {_nobody(config, bool(terminals), bool(desktops))}")
        return False
    told: list[str] = []
    missed: list[str] = []
    if not config.desktop:
        desktops = ()
    # One child per user, all at once, started before the terminals are written: a server
    # that never answers costs its own user's notification, not the next user's (each child
    # is killed by ``end``), and stuck terminals (^S, 0.25 s each) cost no desktop its time.
    with ThreadPoolExecutor(max_workers=max(1, min(len(desktops), MAX_CHILDREN))) as pool:
        sent = [pool.submit(_desktop, s.uid, msg, end, python, bus_address(s.uid))
                for s in desktops]
        if config.wall:
            text = msg.terminal_text(time.time())
            for t in terminals:
                why = write_terminal(t.tty, t.uids, text, min(end, time.monotonic() + TERMINAL_S))
                _note(told, missed, t.who, why)
        for s, future in zip(desktops, sent, strict=True):
            _note(told, missed, f"{s.name}'s desktop", future.result())
    if told:
        log.info("notify: told " + ", ".join(told))
    if missed:
        log.warning("notify: not told " + "; ".join(missed))
    return bool(told)


def _nobody(config: NotifyConfig, text: bool, graphical: bool) -> str:
    """Why logind's sessions leave no one to tell: a headless host, the users of ``[notify]
    users`` not logged in, or only the kind of session the configuration does not tell."""
    if text:
        return "no graphical login session, and [notify] wall = false"
    if graphical:
        return "no text login session, and [notify] desktop = false"
    if config.users:
        return f"no active login session of {', '.join(config.users)} ([notify] users)"
    return "no active login session"


def _note(told: list[str], missed: list[str], who: str, why: str | None) -> None:
    if why:
        missed.append(f"{who}: {why}")
    else:
        told.append(who)


def _desktop(uid: int, msg: Message, end: float, python: str, address: str) -> str | None:
    """The notification sent by a child run as ``uid``; why not, or None once shown.
    Never raises: one user's failure is that user's line in the warning."""
    try:
        return _send(uid, msg, end, python, address)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _send(uid: int, msg: Message, end: float, python: str, address: str) -> str | None:
    bus = address.removeprefix("unix:path=")
    if not os.path.exists(bus):
        return f"no session bus ({bus})"
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return f"uid {uid} has no user account"
    left = end - time.monotonic()
    if left <= CHILD_MARGIN_S:
        return "no time left within [notify] timeout_s"
    env = {"DBUS_SESSION_BUS_ADDRESS": address, "XDG_RUNTIME_DIR": f"/run/user/{uid}",
           "PATH": runner.DEFAULT_PATH, "LANG": "C.UTF-8"}
    result = runner.run([python, "-I", "-m", "suspendguard.notify.send", address,
                         f"{left - CHILD_MARGIN_S:.3f}", msg.summary, msg.desktop_text()],
                        left, env=env, as_user=(uid, gid))
    if result.ok:
        return None
    if result.returncode == 1 and result.stderr.strip():
        return result.stderr.strip().splitlines()[-1]
    return result.describe_failure()


# Format characters (bidi overrides such as U+202E, zero-width ones) and the line and
# paragraph separators U+2028/U+2029: they reorder, hide or break a line on a terminal or
# desktop that honours them.
_UNSHOWN = frozenset({"Cf", "Zl", "Zp"})


def _printable(text: str) -> str:
    """No control characters from a reason (a process name is its owner's to choose)
    reach another user's terminal: each becomes '?', line breaks of every kind included."""
    return "".join("?" if ord(c) < 32 or 0x7f <= ord(c) < 0xa0
                   or unicodedata.category(c) in _UNSHOWN else c for c in text)
