"""What logind says about sleeping (capabilities, inhibitor locks), taking a lock, asking to sleep."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import DEFAULT_TIMEOUT, Failure, Session, converse, value
from suspendguard.system.dbus.systemd import job_removed, watch_jobs

LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_MANAGER = "org.freedesktop.login1.Manager"


@dataclass(frozen=True, slots=True)
class Inhibitor:
    """One entry of logind's ListInhibitors (a(ssssuu))."""

    what: str  # colon-separated: "sleep", "shutdown:sleep", "idle", ...
    who: str
    why: str
    mode: str  # "block", "delay" or "block-weak"
    uid: int
    pid: int

    @property
    def whats(self) -> tuple[str, ...]:
        return tuple(w for w in self.what.split(":") if w)

    def describe(self) -> str:
        return (f"{self.who!r} (pid {self.pid}, uid {self.uid}) holds a {self.mode} lock on "
                f"{self.what}: {self.why}")

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "who": self.who, "why": self.why, "mode": self.mode,
                "uid": self.uid, "pid": self.pid}


@dataclass(frozen=True, slots=True)
class LogindInfo:
    """What logind says about sleeping now."""

    can_suspend: str  # na | yes | no | challenge
    can_hibernate: str
    inhibitors: tuple[Inhibitor, ...]
    inhibit_delay_max_usec: int
    block_inhibited: str  # colon-separated whats, "" when none
    delay_inhibited: str
    preparing_for_sleep: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "available": True,
            "can_suspend": self.can_suspend,
            "can_hibernate": self.can_hibernate,
            "inhibitors": [i.to_json() for i in self.inhibitors],
            "inhibit_delay_max_usec": self.inhibit_delay_max_usec,
            "block_inhibited": self.block_inhibited,
            "delay_inhibited": self.delay_inhibited,
            "preparing_for_sleep": self.preparing_for_sleep,
        }


GUARD_WHO = "suspendguard"  # the "who" of the watch's block (guard/watch.py)


def sleep_blockers(info: LogindInfo,
                   own_pids: Sequence[int] | None = None) -> tuple[Inhibitor, ...]:
    """The ``block`` locks on sleep held by someone else (by default: not this process, and
    not the guard's watch, whose block is the guard's own veto shown early: root's lock named
    suspendguard, as any user may name one).

    They stop a suspend requested by a user; root's own requests pass them
    unless asked to check inhibitors, so they are warnings, not verdicts.
    """
    mine = {os.getpid()} if own_pids is None else set(own_pids)
    return tuple(i for i in info.inhibitors
                 if i.mode == "block" and "sleep" in i.whats and i.pid not in mine
                 and not (i.who == GUARD_WHO and i.uid == 0))


def logind_info(timeout: float = DEFAULT_TIMEOUT,
                address: str | None = None) -> LogindInfo | Unavailable:
    """``address``: the system bus to ask (default: system_bus_address())."""
    return converse("logind", timeout, _logind_info, address)


def take_inhibitor(what: str, who: str, why: str, mode: str = "block",
                   timeout: float = DEFAULT_TIMEOUT) -> int | Unavailable:
    """Take a logind inhibitor lock; the lock lasts until the returned fd is closed.

    The fd is the caller's to close (and is not inherited by child processes).
    """

    async def body(session: Session) -> int:
        reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "Inhibit",
                                   "ssss", [what, who, why, mode], expect="h")
        index = reply.body[0]
        fds: list[int] = list(reply.unix_fds)
        if not isinstance(index, int) or not 0 <= index < len(fds):
            raise Failure(f"Inhibit on {LOGIND_NAME} returned no file descriptor")
        return session.keep(fds[index])

    return converse("logind", timeout, body)


async def _logind_info(session: Session) -> LogindInfo:
    async def string(member: str) -> str:
        reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, member,
                                   expect="s")
        return str(reply.body[0])

    can_suspend = await string("CanSuspend")
    can_hibernate = await string("CanHibernate")
    reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "ListInhibitors",
                               expect="a(ssssuu)")
    inhibitors = tuple(
        Inhibitor(what=str(what), who=str(who), why=str(why), mode=str(mode),
                  uid=int(uid), pid=int(pid))
        for what, who, why, mode, uid, pid in reply.body[0])
    props = await session.get_all(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER)
    where = f"{LOGIND_MANAGER} on {LOGIND_NAME}"
    return LogindInfo(
        can_suspend=can_suspend,
        can_hibernate=can_hibernate,
        inhibitors=inhibitors,
        inhibit_delay_max_usec=value(props, "InhibitDelayMaxUSec", int, where),
        block_inhibited=value(props, "BlockInhibited", str, where),
        delay_inhibited=value(props, "DelayInhibited", str, where),
        preparing_for_sleep=value(props, "PreparingForSleep", bool, where),
    )


# logind's method for each sleep action, and the target it starts for it.
SLEEP_METHODS = {"suspend": "Suspend", "hibernate": "Hibernate", "hybrid-sleep": "HybridSleep",
                 "suspend-then-hibernate": "SuspendThenHibernate"}


@dataclass(frozen=True, slots=True)
class SleepJob:
    """A sleep asked of logind, followed through systemd to its end."""

    action: str
    target: str  # the unit logind starts: suspend.target, ...
    result: str  # the job's result (JobRemoved): done | dependency | failed | canceled | ...
    ended: float  # wall-clock time the job's end was heard

    @property
    def done(self) -> bool:
        return self.result == "done"


def request_sleep(action: str, timeout: float,
                  address: str | None = None) -> SleepJob | Unavailable:
    """Ask logind to sleep (``interactive=false``) and wait until systemd ends the sleep job.

    logind answers as soon as it queued the job (systemd issue 6479), so the
    outcome is the end of the ``ACTION.target`` job, heard as systemd's
    JobRemoved. The watch starts before the request: a veto can end the job
    before logind's answer arrives. ``timeout`` counts awake time only (the
    monotonic clock stops while the machine sleeps).
    """
    method = SLEEP_METHODS[action]
    target = f"{action}.target"

    async def body(session: Session) -> SleepJob:
        await watch_jobs(session)
        await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, method, "b", [False],
                           expect="")
        end = await job_removed(session, target)
        return SleepJob(action=action, target=target, result=end.result, ended=time.time())

    return converse("logind and systemd", timeout, body, address)


def ask_sleep(action: str, timeout: float = DEFAULT_TIMEOUT,
              address: str | None = None) -> bool | Unavailable:
    """Ask logind to sleep (``interactive=false``) and return once it queued the sleep.

    For a caller that must answer before the machine sleeps (a cluster's
    controller waiting on a node); the veto unit still runs the guard first.
    """
    async def body(session: Session) -> bool:
        await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, SLEEP_METHODS[action],
                           "b", [False], expect="")
        return True

    return converse("logind", timeout, body, address)


def can_sleep(action: str, timeout: float = DEFAULT_TIMEOUT,
              address: str | None = None) -> str | Unavailable:
    """logind's Can<Action> answer: na | yes | no | challenge."""

    async def body(session: Session) -> str:
        reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER,
                                   f"Can{SLEEP_METHODS[action]}", expect="s")
        return str(reply.body[0])

    return converse("logind", timeout, body, address)


LOGIND_SESSION = "org.freedesktop.login1.Session"
GRAPHICAL_TYPES = ("x11", "wayland", "mir")


@dataclass(frozen=True, slots=True)
class LoginSession:
    """One session of logind's ListSessions, with the properties of its object."""

    id: str
    uid: int
    name: str  # the user's name
    type: str  # unspecified | tty | x11 | wayland | mir
    session_class: str  # user | greeter | lock-screen | background
    active: bool
    remote: bool
    state: str  # online | active | closing
    tty: str  # "pts/0", "tty2" or "" (logind keeps it without /dev/)
    display: str

    @property
    def graphical(self) -> bool:
        """An active graphical login of a user (not a greeter's or a lock screen's)."""
        return (self.type in GRAPHICAL_TYPES and self.active and self.session_class == "user"
                and self.state != "closing")

    @property
    def text(self) -> bool:
        """A login whose terminal someone reads: type ``tty`` with a TTY and no display (a
        console, an ssh login with a pty). A graphical session's TTY is the VT its display
        server holds (tty2, tty7), where no one reads text."""
        return self.type == "tty" and bool(self.tty) and not self.display


def list_sessions(timeout: float = DEFAULT_TIMEOUT,
                  address: str | None = None) -> tuple[LoginSession, ...] | Unavailable:
    """Every login session logind knows, each with its type, class, state and terminal."""
    return converse("logind", timeout, _list_sessions, address)


async def _list_sessions(session: Session) -> tuple[LoginSession, ...]:
    reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "ListSessions",
                               expect="a(susso)")
    found = []
    for sid, uid, name, _seat, path in reply.body[0]:
        try:
            props = await session.get_all(LOGIND_NAME, str(path), LOGIND_SESSION)
        except Failure:
            continue  # it closed between the list and the question
        where = f"session {sid} on {LOGIND_NAME}"
        found.append(LoginSession(
            id=str(sid), uid=int(uid), name=str(name),
            type=value(props, "Type", str, where),
            session_class=value(props, "Class", str, where),
            active=value(props, "Active", bool, where),
            remote=value(props, "Remote", bool, where),
            state=value(props, "State", str, where),
            tty=value(props, "TTY", str, where).removeprefix("/dev/"),
            display=value(props, "Display", str, where),
        ))
    return tuple(found)
