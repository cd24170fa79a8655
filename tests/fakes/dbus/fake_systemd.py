"""A fake org.freedesktop.systemd1 Manager with Unit and Service objects.

Real names, paths, interfaces and signatures. Like systemd: LoadUnit returns
a path for any valid name, loading a unit with LoadState "not-found" when no
such unit exists; GetUnit answers NoSuchUnit for a unit that is not loaded. StartUnit queues a
job and answers its path; the job runs the commands the test gave for that
unit ("jobs": {unit: [argv, ...]}), in order, the way the units ordered
before a sleep target run; the first that fails ends the job with result
"dependency", as a failed RequiredBy= unit does, otherwise "done". JobNew and
JobRemoved go out only once a client called Subscribe, like systemd's.
For the guard's own supervised jobs: StopUnit runs "stop_jobs" ({unit:
[argv, ...]}, e.g. a kill of the test's job) and leaves the unit inactive; a
unit named there is active again once a StartUnit job ends, after
"start_delay_s" ({unit: seconds}); "hang_stop" (units) never answers a
StopUnit; Reload takes "reload_s" seconds, then fails as systemd's does when
"reload_fails" is set (/run/systemd full); ListUnitsByNames answers as
systemd's does; a unit with "MainPID" is active while that process runs.
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


def active_state(props: dict[str, object]) -> str:
    """The unit's ActiveState; with "MainPID", active while that process runs (not a zombie)."""
    pid = props.get("MainPID")
    if pid:
        try:
            with open(f"/proc/{pid}/stat") as f:
                alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            alive = False
        if not alive:
            props.pop("MainPID")
            props["ActiveState"] = "inactive"
    return str(props.get("ActiveState", "inactive"))


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
        return active_state(self.props)

    @dbus_property(access=PropertyAccess.READ)
    def SubState(self) -> "s":
        return str(self.props.get("SubState", "dead"))

    @dbus_property(access=PropertyAccess.READ)
    def UnitFileState(self) -> "s":
        return str(self.props.get("UnitFileState", ""))

    @dbus_property(access=PropertyAccess.READ)
    def Transient(self) -> "b":
        # Made by StartTransientUnit (systemd-run): a unit's "Transient" in --state.
        return bool(self.props.get("Transient", False))


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

    @dbus_property(access=PropertyAccess.READ)
    def Restart(self) -> "s":
        return str(self.props.get("Restart", "no"))

    @dbus_property(access=PropertyAccess.READ)
    def RestartUSec(self) -> "t":
        return int(self.props.get("RestartUSec", 100000))

    @dbus_property(access=PropertyAccess.READ)
    def TimeoutStopUSec(self) -> "t":
        return int(self.props.get("TimeoutStopUSec", 0))

    @dbus_property(access=PropertyAccess.READ)
    def KillMode(self) -> "s":
        return str(self.props.get("KillMode", "control-group"))


class Job(ServiceInterface):
    """A queued job's object, there while the job runs (systemd removes it at its end)."""

    def __init__(self, job_id: int, unit: str, job_type: str) -> None:
        super().__init__("org.freedesktop.systemd1.Job")
        self.job_id = job_id
        self.job_type = job_type
        self.unit = unit

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> "u":
        return self.job_id

    @dbus_property(access=PropertyAccess.READ)
    def JobType(self) -> "s":
        return self.job_type


class Manager(ServiceInterface):
    def __init__(self, state: dict[str, object]) -> None:
        super().__init__(MANAGER)
        self.on_disk: dict[str, dict[str, object]] = dict(state.get("units", {}))
        self.loaded: set[str] = set()
        self.jobs: dict[str, list[list[str]]] = dict(state.get("jobs", {}))
        self.stop_jobs: dict[str, list[list[str]]] = dict(state.get("stop_jobs", {}))
        self.start_delay_s: dict[str, float] = dict(state.get("start_delay_s", {}))
        self.hang_stop: set[str] = set(state.get("hang_stop", []))
        self.reload_s = float(state.get("reload_s", 0))
        self.reload_fails = bool(state.get("reload_fails", False))
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
        self.bus.export(path, Job(job_id, name, "start"))
        task = asyncio.ensure_future(self._run_job(job_id, path, name))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return path

    @method()
    async def Reload(self) -> None:
        await asyncio.sleep(self.reload_s)
        if self.reload_fails:
            raise DBusError("org.freedesktop.systemd1.DiskFull",
                            "Refusing to reload, not enough space available on /run/systemd.")

    @method()
    async def StopUnit(self, name: "s", mode: "s") -> "o":
        if name in self.hang_stop:
            await asyncio.Event().wait()  # never answers
        self._load(name)
        job_id, self.next_job = self.next_job, self.next_job + 1
        for argv in self.stop_jobs.get(name, []):
            proc = await asyncio.create_subprocess_exec(*argv)
            await proc.wait()
        self.on_disk.setdefault(name, {})["ActiveState"] = "inactive"
        return f"{PATH}/job/{job_id}"

    @method()
    def ListUnitsByNames(self, names: "as") -> "a(ssssssouso)":  # noqa: F722
        rows = []
        for name in names:
            props = self.on_disk.get(name, {})
            rows.append([name, "", str(props.get("LoadState", "loaded" if props else "not-found")),
                         active_state(props),
                         str(props.get("SubState", "dead")), "", self._load(name), 0, "", "/"])
        return rows

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
        if unit in self.stop_jobs:
            # The job's path must answer GetAll while the start runs, as systemd's does.
            await asyncio.sleep(self.start_delay_s.get(unit, 0.0))
            self.on_disk[unit]["ActiveState"] = "active"
        self.bus.unexport(path)
        if self.subscribed:
            self.JobRemoved([job_id, path, unit, result])
