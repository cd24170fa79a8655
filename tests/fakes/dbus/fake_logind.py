"""A fake org.freedesktop.login1 Manager: the calls and properties suspendguard reads.

It speaks logind's real names, path, interface and signatures. Inhibit works
the way logind does it: the service makes a pipe, hands the caller the write
end as a real fd (D-Bus type h) and keeps the read end; when every copy of the
write end is closed the read end sees end-of-file and the lock is dropped.
No `from __future__ import annotations`: dbus-next reads the D-Bus signatures
from the annotations.
"""

# D-Bus signatures in annotations ("s", "a(ssssuu)") are not Python names.
# ruff: noqa: F821

import asyncio
import json
import os
import time
from dataclasses import dataclass

from dbus_next import DBusError, Message, MessageType
from dbus_next.service import PropertyAccess, ServiceInterface, dbus_property, method, signal

NAME = "org.freedesktop.login1"
PATH = "/org/freedesktop/login1"
INTERFACE = "org.freedesktop.login1.Manager"

# logind's order when it joins lock types into BlockInhibited/DelayInhibited.
WHATS = ("shutdown", "sleep", "idle", "handle-power-key", "handle-suspend-key",
         "handle-hibernate-key", "handle-lid-switch", "handle-reboot-key")
MODES = ("block", "delay", "block-weak")
# The sleep methods and the target logind starts for each (execute_shutdown_or_sleep).
SLEEP_TARGETS = {"Suspend": "suspend.target", "Hibernate": "hibernate.target",
                 "HybridSleep": "hybrid-sleep.target",
                 "SuspendThenHibernate": "suspend-then-hibernate.target"}


@dataclass
class Lock:
    what: str
    who: str
    why: str
    mode: str
    uid: int
    pid: int
    read_fd: int | None = None  # None: a lock preset by the test, never released

    def row(self) -> list[object]:
        return [self.what, self.who, self.why, self.mode, self.uid, self.pid]


class LoginManager(ServiceInterface):
    def __init__(self, state: dict[str, object]) -> None:
        super().__init__(INTERFACE)
        self.can_suspend = str(state.get("can_suspend", "yes"))
        self.can_hibernate = str(state.get("can_hibernate", "no"))
        self.delay_max_usec = int(state.get("inhibit_delay_max_usec", 5_000_000))
        self.preparing = bool(state.get("preparing_for_sleep", False))
        self.locks: list[Lock] = [Lock(*row) for row in state.get("inhibitors", [])]
        # logind's InhibitorsMax: an Inhibit beyond it is refused (LimitsExceeded).
        self.inhibitors_max = int(state.get("inhibitors_max", 8192))
        # [error name, message] every sleep method answers with, as logind does when
        # polkit says no or a block inhibitor applies; None: the sleep is started.
        self.sleep_error = state.get("sleep_error")
        self.bus: object = None
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self.sleep_job: str | None = None  # the job path of the sleep in progress
        # A file that gets one JSON line per lock taken and per lock dropped (who, why,
        # mode, what, pid, the monotonic time): the order a test can check. None: none.
        self.inhibit_log = state.get("inhibit_log")
        # The login sessions: a list of {id, uid, name, seat, type, class, active, remote,
        # state, tty, display}, each exported at its own path as logind does.
        self.sessions = [LoginSession(doc) for doc in state.get("sessions", [])]
        # The lid and idle state logind reports (LidClosed, HandleLidSwitch*, IdleHint ...).
        # lid_file: a file whose content, read at each question, says "closed" or "open":
        # a test opens the lid while a client waits. Absent: lid_closed.
        self.lid_closed = bool(state.get("lid_closed", False))
        self.lid_file = state.get("lid_file")
        self.handle_lid = {key: str(state.get(key, default)) for key, default in (
            ("handle_lid_switch", "suspend"), ("handle_lid_switch_external_power", ""),
            ("handle_lid_switch_docked", "ignore"))}
        self.docked = bool(state.get("docked", False))
        self.on_external_power = bool(state.get("on_external_power", False))
        self.idle_hint = bool(state.get("idle_hint", False))
        self.idle_since_usec = int(state.get("idle_since_usec", 0))
        self.idle_action = str(state.get("idle_action", "ignore"))

    def attach(self, bus: object) -> None:
        """Export on the bus, and take Inhibit calls before dbus-next's dispatcher.

        dbus-next's own method dispatch cannot tell when the reply carrying the
        fd has been written, and our copy of the write end must stay open until
        then; so Inhibit is answered here, and still declared below so that
        introspection shows it.
        """
        self.bus = bus
        bus.export(PATH, self)
        for session in self.sessions:
            bus.export(session.path, session)
        bus.add_message_handler(self._intercept_inhibit)
        bus.add_message_handler(self._note_job_removed)

    def _note_job_removed(self, msg: Message) -> bool:
        self.job_removed(msg)
        return False

    # --- methods ----------------------------------------------------------------

    @method()
    def CanSuspend(self) -> "s":
        return self.can_suspend

    @method()
    def CanHibernate(self) -> "s":
        return self.can_hibernate

    @method()
    def ListSessions(self) -> "a(susso)":
        return [[s.id, s.uid, s.user, s.seat, s.path] for s in self.sessions]

    @method()
    def ListInhibitors(self) -> "a(ssssuu)":
        return [lock.row() for lock in self.locks]

    @method()
    def Inhibit(self, what: "s", who: "s", why: "s", mode: "s") -> "h":
        raise AssertionError("Inhibit is answered by _intercept_inhibit")

    @method()
    def Suspend(self, interactive: "b") -> None:
        self._sleep("Suspend")

    @method()
    def Hibernate(self, interactive: "b") -> None:
        self._sleep("Hibernate")

    @method()
    def HybridSleep(self, interactive: "b") -> None:
        self._sleep("HybridSleep")

    @method()
    def SuspendThenHibernate(self, interactive: "b") -> None:
        self._sleep("SuspendThenHibernate")

    @signal()
    def PrepareForSleep(self, start: bool) -> "b":
        return start

    # --- sleeping, the way logind does it -------------------------------------------

    def _sleep(self, method_name: str) -> None:
        if self.sleep_error:
            name, text = self.sleep_error
            raise DBusError(name, text)
        if self.sleep_job is not None:
            raise DBusError("org.freedesktop.login1.OperationInProgress",
                            "There's already a shutdown or sleep operation in progress")
        self.sleep_job = "starting"
        task = asyncio.ensure_future(self._start_sleep(SLEEP_TARGETS[method_name]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _start_sleep(self, target: str) -> None:
        """PrepareForSleep(true), then systemd's StartUnit of the target; (false) once it ended."""
        self.preparing = True
        self.PrepareForSleep(True)
        await self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus", member="AddMatch", signature="s",
            body=["type='signal',sender='org.freedesktop.systemd1',member='JobRemoved'"]))
        reply = await self.bus.call(Message(
            destination="org.freedesktop.systemd1", path="/org/freedesktop/systemd1",
            interface="org.freedesktop.systemd1.Manager", member="StartUnit", signature="ss",
            body=[target, "replace-irreversibly"]))
        if reply.message_type != MessageType.METHOD_RETURN:
            self._slept()
            return
        self.sleep_job = reply.body[0]

    def job_removed(self, msg: Message) -> None:
        if (msg.message_type == MessageType.SIGNAL and msg.member == "JobRemoved"
                and msg.body and msg.body[1] == self.sleep_job):
            self._slept()

    def _slept(self) -> None:
        self.sleep_job = None
        self.preparing = False
        self.PrepareForSleep(False)

    # --- properties -------------------------------------------------------------

    @dbus_property(access=PropertyAccess.READ)
    def InhibitDelayMaxUSec(self) -> "t":
        return self.delay_max_usec

    @dbus_property(access=PropertyAccess.READ)
    def BlockInhibited(self) -> "s":
        return self._inhibited("block")

    @dbus_property(access=PropertyAccess.READ)
    def DelayInhibited(self) -> "s":
        return self._inhibited("delay")

    @dbus_property(access=PropertyAccess.READ)
    def PreparingForSleep(self) -> "b":
        return self.preparing

    @dbus_property(access=PropertyAccess.READ)
    def LidClosed(self) -> "b":
        if self.lid_file:
            try:
                with open(str(self.lid_file)) as f:
                    return f.read().strip() == "closed"
            except FileNotFoundError:
                return False
        return self.lid_closed

    @dbus_property(access=PropertyAccess.READ)
    def Docked(self) -> "b":
        return self.docked

    @dbus_property(access=PropertyAccess.READ)
    def OnExternalPower(self) -> "b":
        return self.on_external_power

    @dbus_property(access=PropertyAccess.READ)
    def HandleLidSwitch(self) -> "s":
        return self.handle_lid["handle_lid_switch"]

    @dbus_property(access=PropertyAccess.READ)
    def HandleLidSwitchExternalPower(self) -> "s":
        return self.handle_lid["handle_lid_switch_external_power"]

    @dbus_property(access=PropertyAccess.READ)
    def HandleLidSwitchDocked(self) -> "s":
        return self.handle_lid["handle_lid_switch_docked"]

    @dbus_property(access=PropertyAccess.READ)
    def IdleHint(self) -> "b":
        return self.idle_hint

    @dbus_property(access=PropertyAccess.READ)
    def IdleSinceHint(self) -> "t":
        return self.idle_since_usec

    @dbus_property(access=PropertyAccess.READ)
    def IdleAction(self) -> "s":
        return self.idle_action

    # --- Inhibit, the real way ------------------------------------------------------

    def _inhibited(self, mode: str) -> str:
        held = {w for lock in self.locks if lock.mode == mode for w in lock.what.split(":")}
        return ":".join(w for w in WHATS if w in held)

    def _intercept_inhibit(self, msg: Message) -> bool:
        if (msg.message_type == MessageType.METHOD_CALL and msg.path == PATH
                and msg.interface == INTERFACE and msg.member == "Inhibit"):
            task = asyncio.ensure_future(self._inhibit(msg))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
            return True
        return False

    async def _inhibit(self, msg: Message) -> None:
        bus = self.bus
        if msg.signature != "ssss":
            bus.send(Message.new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs",
                                       f"Invalid signature {msg.signature!r}"))
            return
        what, who, why, mode = msg.body
        whats = what.split(":")
        if not what or any(w not in WHATS for w in whats):
            bus.send(Message.new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs",
                                       "Invalid what specification"))
            return
        if mode not in MODES:
            bus.send(Message.new_error(msg, "org.freedesktop.DBus.Error.InvalidArgs",
                                       "Invalid mode specification"))
            return
        if len(self.locks) >= self.inhibitors_max:
            bus.send(Message.new_error(
                msg, "org.freedesktop.DBus.Error.LimitsExceeded",
                f"Maximum number of inhibitors ({self.inhibitors_max}) reached, refusing "
                "further inhibitors."))
            return
        pid = await self._credential("GetConnectionUnixProcessID", msg.sender)
        uid = await self._credential("GetConnectionUnixUser", msg.sender)
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        lock = Lock(what, who, why, mode, uid, pid, read_fd)
        self.locks.append(lock)
        self._note("taken", lock)
        asyncio.get_running_loop().add_reader(read_fd, self._on_readable, lock)
        sent = bus.send(Message.new_method_return(msg, "h", [0], [write_fd]))
        # The bus has its own copy once the message is written: drop ours then.
        sent.add_done_callback(lambda _: os.close(write_fd))

    async def _credential(self, member: str, sender: str) -> int:
        reply = await self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus", member=member, signature="s", body=[sender]))
        return int(reply.body[0]) if reply.message_type == MessageType.METHOD_RETURN else 0

    def _on_readable(self, lock: Lock) -> None:
        assert lock.read_fd is not None
        try:
            data = os.read(lock.read_fd, 64)
        except BlockingIOError:
            return
        if data:
            return  # logind ignores writes too
        asyncio.get_running_loop().remove_reader(lock.read_fd)
        os.close(lock.read_fd)
        lock.read_fd = None
        self.locks.remove(lock)
        self._note("released", lock)

    def _note(self, event: str, lock: Lock) -> None:
        if self.inhibit_log:
            with open(str(self.inhibit_log), "a") as f:
                f.write(json.dumps({"event": event, "what": lock.what, "who": lock.who,
                                    "why": lock.why, "mode": lock.mode, "pid": lock.pid,
                                    "t": time.monotonic()}) + "\n")


class LoginSession(ServiceInterface):
    """org.freedesktop.login1.Session: the properties a client reads of one session."""

    def __init__(self, doc: dict[str, object]) -> None:
        super().__init__("org.freedesktop.login1.Session")
        self.id = str(doc["id"])
        self.uid = int(doc.get("uid", 1000))
        self.user = str(doc.get("name", "user"))
        self.seat = str(doc.get("seat", ""))
        self.path = f"{PATH}/session/_3{self.id}"  # logind's escaping of a leading digit
        self.doc = doc

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> "s":
        return self.id

    @dbus_property(access=PropertyAccess.READ)
    def Name(self) -> "s":
        return self.user

    @dbus_property(access=PropertyAccess.READ)
    def User(self) -> "(uo)":
        return [self.uid, f"{PATH}/user/_{self.uid}"]

    @dbus_property(access=PropertyAccess.READ)
    def Type(self) -> "s":
        return str(self.doc.get("type", "tty"))

    @dbus_property(access=PropertyAccess.READ)
    def Class(self) -> "s":
        return str(self.doc.get("class", "user"))

    @dbus_property(access=PropertyAccess.READ)
    def Active(self) -> "b":
        return bool(self.doc.get("active", True))

    @dbus_property(access=PropertyAccess.READ)
    def Remote(self) -> "b":
        return bool(self.doc.get("remote", False))

    @dbus_property(access=PropertyAccess.READ)
    def State(self) -> "s":
        return str(self.doc.get("state", "active"))

    @dbus_property(access=PropertyAccess.READ)
    def TTY(self) -> "s":
        return str(self.doc.get("tty", ""))

    @dbus_property(access=PropertyAccess.READ)
    def Display(self) -> "s":
        return str(self.doc.get("display", ""))
