"""A fake org.freedesktop.systemd1 Manager with Unit and Service objects.

Real names, paths, interfaces and signatures. Like systemd: LoadUnit returns
a path for any valid name, loading a unit with LoadState "not-found" when no
such unit exists; GetUnit answers NoSuchUnit for a unit that is not loaded. StartUnit queues a
job and answers its path; the job runs the commands the test gave for that
unit ("jobs": {unit: [argv, ...]}), in order, the way the units ordered
before a sleep target run; the first that fails ends the job with result
"dependency", as a failed RequiredBy= unit does, otherwise "done". JobNew and
JobRemoved go out only once a client called Subscribe, like systemd's.
No `from __future__ import annotations`: dbus-next reads the D-Bus signatures
from the annotations.
"""

# D-Bus signatures in annotations ("s", "a(ssssuu)") are not Python names.
# ruff: noqa: F821

import asyncio
import re

from dbus_next import DBusError
from dbus_next.service import PropertyAccess, ServiceInterface, dbus_property, method, signal

NAME = "org.freedesktop.systemd1"
PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT = "org.freedesktop.systemd1.Unit"
SERVICE = "org.freedesktop.systemd1.Service"

_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.[a-z]+$")


def unit_path(name: str) -> str:
    """systemd's object path for a unit (sd_bus_path_encode's escaping)."""
    label = "".join(
        c if c.isascii() and (c.isalpha() or (c.isdigit() and i > 0)) else f"_{ord(c):02x}"
        for i, c in enumerate(name))
    return f"{PATH}/unit/{label}"


class Unit(ServiceInterface):
    def __init__(self, name: str, props: dict[str, object]) -> None:
        super().__init__(UNIT)
        self.unit_name = name  # not .name: ServiceInterface keeps the interface name there
        self.props = props

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> "s":
        return self.unit_name

    @dbus_property(access=PropertyAccess.READ)
    def LoadState(self) -> "s":
        return str(self.props.get("LoadState", "loaded"))

    @dbus_property(access=PropertyAccess.READ)
    def ActiveState(self) -> "s":
        return str(self.props.get("ActiveState", "inactive"))

    @dbus_property(access=PropertyAccess.READ)
    def SubState(self) -> "s":
        return str(self.props.get("SubState", "dead"))

    @dbus_property(access=PropertyAccess.READ)
    def UnitFileState(self) -> "s":
        return str(self.props.get("UnitFileState", ""))


class Service(ServiceInterface):
    def __init__(self, props: dict[str, object]) -> None:
        super().__init__(SERVICE)
        self.props = props

    @dbus_property(access=PropertyAccess.READ)
    def Result(self) -> "s":
        return str(self.props.get("Result", "success"))

    @dbus_property(access=PropertyAccess.READ)
    def ExecMainStatus(self) -> "i":
        return int(self.props.get("ExecMainStatus", 0))


class Manager(ServiceInterface):
    def __init__(self, state: dict[str, object]) -> None:
        super().__init__(MANAGER)
        self.on_disk: dict[str, dict[str, object]] = dict(state.get("units", {}))
        self.loaded: set[str] = set()
        self.jobs: dict[str, list[list[str]]] = dict(state.get("jobs", {}))
        self.next_job = 1
        self.subscribed = False
        self.tasks: set[asyncio.Task[None]] = set()
        self.bus: object = None

    def attach(self, bus: object) -> None:
        self.bus = bus
        bus.export(PATH, self)
        for name in self.on_disk:
            self._load(name)

    def _load(self, name: str) -> str:
        if name not in self.loaded:
            props = self.on_disk.get(name) or {
                "LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead",
                "UnitFileState": ""}
            self.bus.export(unit_path(name), Unit(name, props))
            if name.endswith(".service"):
                self.bus.export(unit_path(name), Service(props))
            self.loaded.add(name)
        return unit_path(name)

    @method()
    def LoadUnit(self, name: "s") -> "o":
        if not _UNIT_NAME.match(name):
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs",
                            f"Unit name {name} is not valid.")
        return self._load(name)

    @method()
    def GetUnit(self, name: "s") -> "o":
        if name not in self.loaded:
            raise DBusError("org.freedesktop.systemd1.NoSuchUnit", f"Unit {name} not loaded.")
        return unit_path(name)

    @method()
    def Subscribe(self) -> None:
        self.subscribed = True

    @method()
    def StartUnit(self, name: "s", mode: "s") -> "o":
        if not _UNIT_NAME.match(name):
            raise DBusError("org.freedesktop.DBus.Error.InvalidArgs",
                            f"Unit name {name} is not valid.")
        self._load(name)
        job_id, self.next_job = self.next_job, self.next_job + 1
        path = f"{PATH}/job/{job_id}"
        task = asyncio.ensure_future(self._run_job(job_id, path, name))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return path

    @signal()
    def JobNew(self, job: list[object]) -> "uos":
        return job

    @signal()
    def JobRemoved(self, job: list[object]) -> "uoss":
        return job

    async def _run_job(self, job_id: int, path: str, unit: str) -> None:
        await asyncio.sleep(0)  # the StartUnit reply goes out first, as in systemd
        if self.subscribed:
            self.JobNew([job_id, path, unit])
        result = "done"
        for argv in self.jobs.get(unit, []):
            proc = await asyncio.create_subprocess_exec(*argv)
            if await proc.wait() != 0:
                result = "dependency"
                break
        if self.subscribed:
            self.JobRemoved([job_id, path, unit, result])
