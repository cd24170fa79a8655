"""logind and systemd over the system D-Bus: the one module that imports dbus-next.

The rest of the program sees a synchronous API and plain frozen dataclasses.
Each call runs its own event loop (``asyncio.run``), because dbus-next must
build its bus inside a running loop, and each call is bounded by a timeout:
a missing bus, a missing service, a refused connection or a service that
never answers comes back as an :class:`Unavailable` value with a one-line
reason, never as an exception.

The bus is made with ``negotiate_unix_fd=True``: without it dbus-next cannot
receive the fd that logind's ``Inhibit`` returns and the call hangs. With it,
dbus-next leaves every received fd open, so this module closes every fd it
receives except the one :func:`take_inhibitor` hands to its caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dbus_next.aio.message_bus import MessageBus
from dbus_next.constants import MessageType
from dbus_next.message import Message
from dbus_next.signature import Variant

from suspendguard.model import Unavailable

DEFAULT_TIMEOUT = 2.0
DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"

LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_MANAGER = "org.freedesktop.login1.Manager"

SYSTEMD_NAME = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
SYSTEMD_MANAGER = "org.freedesktop.systemd1.Manager"
SYSTEMD_UNIT = "org.freedesktop.systemd1.Unit"
SYSTEMD_SERVICE = "org.freedesktop.systemd1.Service"

PROPERTIES = "org.freedesktop.DBus.Properties"

# Errors that mean "nobody owns that name": the service is not running.
_ABSENT = frozenset({
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
})
_NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"

T = TypeVar("T")


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class UnitInfo:
    """A unit as systemd's manager reports it.

    ``result`` and ``exec_main_status`` come from the Service interface and
    are None for units that are not services (or not loaded).
    """

    name: str
    load_state: str  # loaded | not-found | bad-setting | error | masked
    active_state: str  # active | inactive | failed | activating | ...
    sub_state: str
    unit_file_state: str  # enabled | disabled | static | "" ...
    result: str | None = None  # success | exit-code | timeout | ...
    exec_main_status: int | None = None

    @property
    def found(self) -> bool:
        return self.load_state not in ("not-found", "")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "load_state": self.load_state,
                "active_state": self.active_state, "sub_state": self.sub_state,
                "unit_file_state": self.unit_file_state, "result": self.result,
                "exec_main_status": self.exec_main_status}


def system_bus_address(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS


def sleep_blockers(info: LogindInfo,
                   own_pids: Sequence[int] | None = None) -> tuple[Inhibitor, ...]:
    """The ``block`` locks on sleep held by someone else (by default: not this process).

    They stop a suspend requested by a user; root's own requests pass them
    unless asked to check inhibitors, so they are warnings, not verdicts.
    """
    mine = {os.getpid()} if own_pids is None else set(own_pids)
    return tuple(i for i in info.inhibitors
                 if i.mode == "block" and "sleep" in i.whats and i.pid not in mine)


def logind_info(timeout: float = DEFAULT_TIMEOUT,
                address: str | None = None) -> LogindInfo | Unavailable:
    """``address``: the system bus to ask (default: system_bus_address())."""
    return _run("logind", timeout, _logind_info, address)


def unit_info(names: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
              address: str | None = None) -> dict[str, UnitInfo] | Unavailable:
    wanted = tuple(names)

    async def body(session: _Session) -> dict[str, UnitInfo]:
        return {name: await _one_unit(session, name) for name in wanted}

    return _run("systemd", timeout, body, address)


def take_inhibitor(what: str, who: str, why: str, mode: str = "block",
                   timeout: float = DEFAULT_TIMEOUT) -> int | Unavailable:
    """Take a logind inhibitor lock; the lock lasts until the returned fd is closed.

    The fd is the caller's to close (and is not inherited by child processes).
    """

    async def body(session: _Session) -> int:
        reply = await session.call(LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER, "Inhibit",
                                   "ssss", [what, who, why, mode], expect="h")
        index = reply.body[0]
        fds: list[int] = list(reply.unix_fds)
        if not isinstance(index, int) or not 0 <= index < len(fds):
            raise _Failure(f"Inhibit on {LOGIND_NAME} returned no file descriptor")
        return session.keep(fds[index])

    return _run("logind", timeout, body)


# --- internals -------------------------------------------------------------------

class _Failure(Exception):
    """A reason to answer Unavailable, raised deep inside a session."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Session:
    """One connection to the system bus for one synchronous call."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.step = f"connecting to the system bus at {address}"
        self._bus: Any = None
        self._received: set[int] = set()
        self._kept: set[int] = set()
        self._waiting: set[int] = set()  # serials of calls still expecting a reply

    async def connect(self) -> None:
        try:
            self._bus = _new_bus(self.address)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise _Failure(f"no system bus at {self.address} ({e.strerror})") from None
        except OSError as e:
            raise _Failure(f"cannot connect to the system bus at {self.address} "
                           f"({e.strerror or e})") from None
        self._bus.add_message_handler(self._note_fds)
        self.step = f"authenticating to the system bus at {self.address}"
        try:
            await self._bus.connect()
        except OSError as e:
            raise _Failure(f"the system bus at {self.address} dropped the connection "
                           f"({e.strerror or e})") from None
        except Exception as e:  # dbus-next's AuthError and friends
            raise _Failure(f"the system bus at {self.address} refused the connection "
                           f"({type(e).__name__}: {e})") from None

    async def call(self, destination: str, path: str, interface: str, member: str,
                   signature: str = "", body: Sequence[Any] = (), *, expect: str) -> Any:
        """A method call; an error reply or an unexpected signature raises _Failure."""
        self.step = f"{interface.rsplit('.', 1)[-1]}.{member} on {destination}"
        msg = Message(destination=destination, path=path, interface=interface,
                      member=member, signature=signature, body=list(body),
                      serial=self._bus.next_serial())
        self._waiting.add(msg.serial)
        try:
            reply = await self._bus.call(msg)
        finally:
            self._waiting.discard(msg.serial)
        if reply is None:
            raise _Failure(f"{self.step}: the connection closed before a reply")
        if reply.message_type == MessageType.ERROR:
            raise _CallError(reply.error_name or "", _error_text(reply), self.step, destination)
        if reply.signature != expect:
            raise _Failure(f"{self.step} answered with signature {reply.signature!r}, "
                           f"expected {expect!r}")
        return reply

    def keep(self, fd: int) -> int:
        os.set_inheritable(fd, False)
        self._kept.add(fd)
        return fd

    def _note_fds(self, msg: Any) -> bool:
        # dbus-next never closes the fds that come with a message. Those of a reply
        # we wait for are noted here, before any await can be cancelled, and closed
        # with the session unless kept; anything else (signals, late replies) is
        # closed now.
        fds = list(msg.unix_fds or ())
        if (msg.message_type in (MessageType.METHOD_RETURN, MessageType.ERROR)
                and msg.reply_serial in self._waiting):
            self._received.update(fds)
        else:
            _close_all(fds)
        return False  # not handled: dbus-next goes on to deliver the message

    def close(self, *, keep_kept: bool) -> None:
        bus = self._bus
        self._bus = None
        if bus is not None:
            _drop_bus(bus)
        _close_all(self._received - (self._kept if keep_kept else set()))
        if not keep_kept:
            _close_all(self._kept)


class _CallError(_Failure):
    def __init__(self, name: str, text: str, step: str, destination: str) -> None:
        self.name = name
        if name in _ABSENT:
            reason = f"{destination} is not on the system bus ({name})"
        else:
            reason = f"{step} failed: {name}: {text}"
        super().__init__(reason)


def _run(service: str, timeout: float, body: Callable[[_Session], Awaitable[T]],
         address: str | None = None) -> T | Unavailable:
    """Run one bounded D-Bus conversation in a fresh event loop."""

    async def conversation() -> T | Unavailable:
        session = _Session(address or system_bus_address())
        ok = False
        try:
            async def steps() -> T:
                await session.connect()
                return await body(session)

            result = await asyncio.wait_for(steps(), timeout)
            ok = True
            return result
        except asyncio.TimeoutError:
            return Unavailable(f"{service}: unavailable: {session.step} timed out "
                               f"after {timeout:g} s")
        except _Failure as e:
            return Unavailable(f"{service}: unavailable: {e.reason}")
        except Exception as e:  # dbus-next raises bare Exception on a lost connection
            return Unavailable(f"{service}: unavailable: {session.step} failed "
                               f"({type(e).__name__}: {e})")
        finally:
            session.close(keep_kept=ok)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(conversation())
    # Called from async code: asyncio.run refuses to nest, so use a thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, conversation()).result()


def _new_bus(address: str) -> Any:
    # MessageBus.__init__ connects the socket; when that fails dbus-next keeps
    # no reference we could close, so build the object first and clean up here.
    bus = MessageBus.__new__(MessageBus)
    try:
        MessageBus.__init__(bus, bus_address=address, negotiate_unix_fd=True)
    except BaseException:
        _close_socket(bus)
        raise
    return bus


def _drop_bus(bus: Any) -> None:
    """Disconnect and free the socket now (dbus-next only shuts it down)."""
    try:
        if bus.connected:
            bus.disconnect()
        bus._finalize(None)
    except Exception:
        pass
    _close_socket(bus)


def _close_socket(bus: Any) -> None:
    for name in ("_stream", "_sock"):
        thing = getattr(bus, name, None)
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()


def _close_all(fds: set[int] | list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _error_text(reply: Any) -> str:
    body = list(reply.body or ())
    return str(body[0]) if body and isinstance(body[0], str) else "(no message)"


def _value(props: Mapping[str, Any], name: str, kind: type[T], where: str) -> T:
    variant = props.get(name)
    value = variant.value if isinstance(variant, Variant) else variant
    if not isinstance(value, kind):
        raise _Failure(f"{where} has no {kind.__name__} property {name}")
    return value


async def _get_all(session: _Session, destination: str, path: str,
                   interface: str) -> dict[str, Any]:
    reply = await session.call(destination, path, PROPERTIES, "GetAll", "s", [interface],
                               expect="a{sv}")
    props = reply.body[0]
    return dict(props) if isinstance(props, dict) else {}


async def _logind_info(session: _Session) -> LogindInfo:
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
    props = await _get_all(session, LOGIND_NAME, LOGIND_PATH, LOGIND_MANAGER)
    where = f"{LOGIND_MANAGER} on {LOGIND_NAME}"
    return LogindInfo(
        can_suspend=can_suspend,
        can_hibernate=can_hibernate,
        inhibitors=inhibitors,
        inhibit_delay_max_usec=_value(props, "InhibitDelayMaxUSec", int, where),
        block_inhibited=_value(props, "BlockInhibited", str, where),
        delay_inhibited=_value(props, "DelayInhibited", str, where),
        preparing_for_sleep=_value(props, "PreparingForSleep", bool, where),
    )


async def _one_unit(session: _Session, name: str) -> UnitInfo:
    try:
        # LoadUnit, not GetUnit: GetUnit says NoSuchUnit for a unit that exists on
        # disk but is not loaded right now (the veto units, between suspends).
        reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit",
                                   "s", [name], expect="o")
    except _CallError as e:
        if e.name == _NO_SUCH_UNIT:
            return UnitInfo(name=name, load_state="not-found", active_state="inactive",
                            sub_state="dead", unit_file_state="")
        raise
    path = str(reply.body[0])
    props = await _get_all(session, SYSTEMD_NAME, path, SYSTEMD_UNIT)
    where = f"unit {name}"
    result: str | None = None
    status: int | None = None
    if name.endswith(".service"):
        try:
            service = await _get_all(session, SYSTEMD_NAME, path, SYSTEMD_SERVICE)
        except _CallError:
            service = {}  # not loaded, so no Service interface
        result_value = service.get("Result")
        status_value = service.get("ExecMainStatus")
        if isinstance(result_value, Variant) and isinstance(result_value.value, str):
            result = result_value.value
        if isinstance(status_value, Variant) and isinstance(status_value.value, int):
            status = status_value.value
    return UnitInfo(
        name=name,
        load_state=_value(props, "LoadState", str, where),
        active_state=_value(props, "ActiveState", str, where),
        sub_state=_value(props, "SubState", str, where),
        unit_file_state=_value(props, "UnitFileState", str, where),
        result=result,
        exec_main_status=status,
    )
