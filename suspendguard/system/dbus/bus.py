"""One bounded conversation with the system bus: the only module that imports dbus-next.

The rest of the program sees a synchronous API. Each conversation runs its own
event loop (dbus-next builds its bus inside one) and is bounded by a timeout:
a missing bus or service, a refused connection or a service that never answers
is an :class:`Unavailable` value with a one-line reason, never an exception.

The bus is made with ``negotiate_unix_fd=True`` (else logind's ``Inhibit``
fd cannot be received and the call hangs); dbus-next then leaves every fd
open, so a :class:`Session` closes each one its caller does not keep.

The address may also be a systemd manager's private socket
(``/run/user/UID/systemd/private``): a peer with no bus driver, which answers
the ``Hello`` with an error dbus-next keeps as the unique name (unused here).
systemd 252 leaves a message that came with the client's ``BEGIN`` unread
until more bytes come (docs/development.md, "systemd's private socket"), so
while the ``Hello`` is unanswered :class:`Session` writes a ``Peer.Ping`` that
wants no reply, after 2 ms and at doubling intervals up to :data:`NUDGE_S`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dbus_next.aio.message_bus import MessageBus
from dbus_next.constants import MessageFlag, MessageType
from dbus_next.message import Message
from dbus_next.signature import Variant

from suspendguard.model import NoAnswer, Unavailable
from suspendguard.system import deadline
from suspendguard.system.dbus.peer import stranger

DEFAULT_TIMEOUT = 2.0
DEFAULT_SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"

PROPERTIES = "org.freedesktop.DBus.Properties"
PRIVATE_SOCKET = "/systemd/private"  # a manager's own socket, under its runtime folder
NUDGE_FIRST_S = 0.002  # how long a Hello on a private socket waits before a Ping follows it
NUDGE_S = 0.05  # the longest wait between two Pings

# Errors that mean "nobody owns that name": the service is not running.
_ABSENT = frozenset({
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
})

T = TypeVar("T")


def system_bus_address(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS


class Failure(Exception):
    """A reason to answer Unavailable, raised deep inside a session."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallError(Failure):
    """An error reply; ``name`` is the D-Bus error name."""

    def __init__(self, name: str, text: str, step: str, destination: str, bus: str) -> None:
        self.name = name
        super().__init__(f"{destination} is not on the {bus} ({name})" if name in _ABSENT
                         else f"{step} failed: {name}: {text}")


@dataclass(frozen=True, slots=True)
class Signal:
    """A D-Bus signal a session asked to hear (:meth:`Session.watch`)."""

    interface: str
    member: str
    body: tuple[Any, ...]


class Session:
    """One connection to a bus (the system bus unless ``noun`` names another), one call."""

    def __init__(self, address: str, noun: str = "system bus",
                 connect_s: float | None = None) -> None:
        self.address = address
        self.connect_s = connect_s  # the socket's connect, which no event loop bounds
        # A manager's private socket is a peer, not a bus: it gets the nudge (module doc).
        self.peer = address.endswith(PRIVATE_SOCKET)
        self.noun = "systemd private socket" if self.peer else noun
        self.step = f"connecting to the {self.noun} at {address}"
        self._bus: Any = None
        self._received: set[int] = set()
        self._kept: set[int] = set()
        self._waiting: set[int] = set()  # serials of calls still expecting a reply
        self._watched: dict[tuple[str, str], str] = {}  # signal: the unique name it comes from
        self._signals: asyncio.Queue[Signal] | None = None

    async def connect(self) -> None:
        try:
            self._bus = _new_bus(self.address, self.connect_s)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            raise Failure(f"no {self.noun} at {self.address} ({e.strerror})") from None
        except OSError as e:
            raise Failure(f"cannot connect to the {self.noun} at {self.address} "
                          f"({e.strerror or e})") from None
        if self.peer and (refused := stranger(self._bus._sock, self.address)):
            _drop_bus(self._bus)
            raise Failure(f"the {self.noun} at {self.address} {refused}: refused")
        self._bus.add_message_handler(self._note_fds)
        self.step = f"authenticating to the {self.noun} at {self.address}"
        connecting = asyncio.ensure_future(self._bus.connect())
        try:
            if self.peer:
                await self._nudge(connecting)
            await connecting
        except OSError as e:
            raise Failure(f"the {self.noun} at {self.address} dropped the connection "
                          f"({e.strerror or e})") from None
        except Exception as e:  # dbus-next's AuthError and friends
            raise Failure(f"the {self.noun} at {self.address} refused the connection "
                          f"({type(e).__name__}: {e})") from None
        finally:
            if not connecting.done():
                connecting.cancel()

    async def _nudge(self, connecting: asyncio.Future[Any]) -> None:
        """Until the Hello is answered: once authenticated, Pings at doubling intervals."""
        wait = NUDGE_FIRST_S
        while not connecting.done():
            await asyncio.wait({connecting}, timeout=wait)
            wait = min(2 * wait, NUDGE_S)  # also while authenticating: no 2 ms polling
            if connecting.done() or not self._bus.authenticated:
                continue
            ping = Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus.Peer", member="Ping",
                           flags=MessageFlag.NO_REPLY_EXPECTED, serial=self._bus.next_serial())
            # as MessageBus.connect writes its Hello
            self._bus._stream.write(ping._marshall())  # type: ignore[no-untyped-call]
            self._bus._stream.flush()

    async def call(self, destination: str, path: str, interface: str, member: str,
                   signature: str = "", body: Sequence[Any] = (), *, expect: str) -> Any:
        """A method call; an error reply or an unexpected signature raises Failure."""
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
            raise Failure(f"{self.step}: the connection closed before a reply")
        if reply.message_type == MessageType.ERROR:
            raise CallError(reply.error_name or "", _error_text(reply), self.step, destination,
                            self.noun)
        if reply.signature != expect:
            raise Failure(f"{self.step} answered with signature {reply.signature!r}, "
                          f"expected {expect!r}")
        return reply

    async def watch(self, sender: str, interface: str, member: str) -> None:
        """Hear this signal from now on: queued in arrival order, read with :meth:`next_signal`."""
        if self._signals is None:
            self._signals = asyncio.Queue()
        # Any client may send a signal to this connection by its unique name: only the one
        # ``sender`` names now counts (a user's JobRemoved of suspend.target: no sleep done).
        bus = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
        try:
            owner = await self.call(*bus, "GetNameOwner", "s", [sender], expect="s")
        except CallError as e:  # no owner: the sender's absence, not the bus driver's
            raise CallError(e.name, str(e), self.step, sender, self.noun) from None
        self._watched[(interface, member)] = str(owner.body[0])
        rule = f"type='signal',sender='{sender}',interface='{interface}',member='{member}'"
        await self.call(*bus, "AddMatch", "s", [rule], expect="")

    async def next_signal(self) -> Signal:
        """The next watched signal, waiting for it (the conversation's timeout bounds the wait)."""
        if self._signals is None:
            raise Failure("no signal is watched on this connection")
        self.step = "waiting for " + " or ".join(sorted(f"{i.rsplit('.', 1)[-1]}.{m}"
                                                        for i, m in self._watched))
        return await self._signals.get()

    async def get_all(self, destination: str, path: str, interface: str) -> dict[str, Any]:
        """Properties.GetAll, values still wrapped (read them with :func:`value`)."""
        reply = await self.call(destination, path, PROPERTIES, "GetAll", "s", [interface],
                                expect="a{sv}")
        props = reply.body[0]
        return dict(props) if isinstance(props, dict) else {}

    def keep(self, fd: int) -> int:
        """Hand a received fd to the caller: not closed with the session, not inherited."""
        os.set_inheritable(fd, False)
        self._kept.add(fd)
        return fd

    def _note_fds(self, msg: Any) -> bool:
        # dbus-next never closes a message's fds: a reply's awaited are noted here, before
        # any await can be cancelled, and closed with the session unless kept; others now.
        fds = list(msg.unix_fds or ())
        if (msg.message_type == MessageType.SIGNAL and self._signals is not None
                and self._watched.get((msg.interface, msg.member)) == msg.sender):
            self._signals.put_nowait(Signal(msg.interface, msg.member, tuple(msg.body or ())))
        if (msg.message_type in (MessageType.METHOD_RETURN, MessageType.ERROR)
                and msg.reply_serial in self._waiting):
            self._received.update(fds)
        else:
            _close_all(fds)
        return False  # not handled: dbus-next goes on to deliver the message

    def close(self, *, keep_kept: bool) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            _drop_bus(bus)
        _close_all(self._received - (self._kept if keep_kept else set()))
        if not keep_kept:
            _close_all(self._kept)


def value(props: Mapping[str, Any], name: str, kind: type[T], where: str) -> T:
    """A property that must be there with this type; otherwise Failure."""
    found = optional(props, name, kind)
    if found is None:
        raise Failure(f"{where} has no {kind.__name__} property {name}")
    return found


def variant(signature: str, data: Any) -> Any:
    """A value for a ``v`` argument (StartTransientUnit's properties)."""
    return Variant(signature, data)


def optional(props: Mapping[str, Any], name: str, kind: type[T]) -> T | None:
    """A property that may be missing: None when absent or of another type."""
    variant = props.get(name)
    found = variant.value if isinstance(variant, Variant) else variant
    return found if isinstance(found, kind) else None


def converse(service: str, timeout: float, body: Callable[[Session], Awaitable[T]],
             address: str | None = None, noun: str = "system bus") -> T | Unavailable:
    """Run one bounded D-Bus conversation in a fresh event loop.

    ``service`` names the answer's source in an Unavailable reason; ``address``: the bus
    to ask (default: :func:`system_bus_address`), which the reasons call ``noun``. Inside
    a guard run the timeout is cut to what is left of its deadline, and the guard's cancel
    (SIGTERM) ends the conversation at once.
    """
    bound = deadline.current()
    wanted = timeout
    timeout = bound.cap(timeout)

    async def conversation() -> T | Unavailable:
        session = Session(address or system_bus_address(), noun, max(timeout, 0.001))
        ok = False
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        fd = bound.cancel_fd
        if fd is not None and task is not None:
            loop.add_reader(fd, task.cancel)
        try:
            if bound.cancelled:
                raise asyncio.CancelledError

            async def steps() -> T:
                await session.connect()
                return await body(session)

            result = await asyncio.wait_for(steps(), timeout)
            ok = True
            return result
        except asyncio.CancelledError:
            why = bound.cancel.reason if bound.cancel is not None else "cancelled"
            return NoAnswer(f"{service}: unavailable: {session.step} was interrupted ({why})")
        except asyncio.TimeoutError:
            cut = f" (cut from {wanted:g} s by the guard's deadline)" if timeout < wanted else ""
            return NoAnswer(f"{service}: unavailable: {session.step} timed out "
                            f"after {timeout:g} s{cut}")
        except Failure as e:
            return Unavailable(f"{service}: unavailable: {e.reason}")
        except Exception as e:  # dbus-next raises bare Exception on a lost connection
            return Unavailable(f"{service}: unavailable: {session.step} failed "
                               f"({type(e).__name__}: {e})")
        finally:
            if fd is not None:
                loop.remove_reader(fd)
            session.close(keep_kept=ok)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(conversation())
    # Called from async code: asyncio.run refuses to nest, so use a thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, conversation()).result()


MAX_AUTH_LINE = 4096  # an authentication line is tens of bytes (OK GUID, AGREE_UNIX_FD)


class _Bus(MessageBus):
    """dbus-next's bus, which says when its authentication is over (after BEGIN)."""

    authenticated = False
    connect_s: float | None = None  # set before MessageBus.__init__ connects

    async def _authenticate(self) -> None:
        await super()._authenticate()  # type: ignore[no-untyped-call]
        self.authenticated = True

    def _setup_socket(self) -> None:
        """dbus-next 0.2's for one unix address, its connect (blocking there, where no loop
        timeout nor cancel ends it) made without blocking and tried again until
        ``connect_s``: Linux answers EAGAIN while a listener's backlog is full."""
        [(transport, options), *more] = self._bus_address
        name = options.get("path") or ("\0" + options["abstract"] if "abstract" in options else "")
        if transport != "unix" or more or not name:
            super()._setup_socket()  # type: ignore[no-untyped-call]
            return
        until = time.monotonic() + (self.connect_s or 0.0)
        while True:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.setblocking(False)  # as dbus-next leaves it once connected
            self._stream, self._fd = self._sock.makefile("rwb"), self._sock.fileno()
            try:
                self._sock.connect(name)
                return
            except BlockingIOError:  # any other error: _new_bus closes the socket
                _close_socket(self)
                if time.monotonic() >= until or deadline.current().cancelled:
                    raise
            time.sleep(0.02)

    async def _auth_readline(self) -> str:
        """dbus-next 0.2's, but a peer that closed (an empty read) or sends no line end ends
        it: its loop would go on without ever yielding, where no timeout or cancel can fire."""
        buf = b""
        while buf[-2:] != b"\r\n":
            data = await self._loop.sock_recv(self._sock, 2)
            if not data:
                raise EOFError("the bus closed the connection while it authenticated the guard")
            buf += data
            if len(buf) > MAX_AUTH_LINE:
                raise EOFError(f"the bus sent more than {MAX_AUTH_LINE} bytes with no line end "
                               "while it authenticated the guard")
        return buf[:-2].decode()


def _new_bus(address: str, connect_s: float | None = None) -> Any:
    # MessageBus.__init__ connects; failing, it keeps no reference to close: made here first.
    bus = _Bus.__new__(_Bus)
    bus.connect_s = connect_s
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
