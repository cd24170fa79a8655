"""How systemd's manager reports units (the guard's veto units among them), and its jobs' ends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.model import Unavailable
from suspendguard.system.dbus.bus import (
    DEFAULT_TIMEOUT,
    CallError,
    Session,
    converse,
    optional,
    value,
)

SYSTEMD_NAME = "org.freedesktop.systemd1"
SYSTEMD_PATH = "/org/freedesktop/systemd1"
SYSTEMD_MANAGER = "org.freedesktop.systemd1.Manager"
SYSTEMD_UNIT = "org.freedesktop.systemd1.Unit"
SYSTEMD_SERVICE = "org.freedesktop.systemd1.Service"

_NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"


@dataclass(frozen=True, slots=True)
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


def unit_info(names: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
              address: str | None = None) -> dict[str, UnitInfo] | Unavailable:
    wanted = tuple(names)

    async def body(session: Session) -> dict[str, UnitInfo]:
        return {name: await _one_unit(session, name) for name in wanted}

    return converse("systemd", timeout, body, address)


async def _one_unit(session: Session, name: str) -> UnitInfo:
    try:
        # LoadUnit, not GetUnit: GetUnit says NoSuchUnit for a unit that exists on
        # disk but is not loaded right now (the veto units, between suspends).
        reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit",
                                   "s", [name], expect="o")
    except CallError as e:
        if e.name == _NO_SUCH_UNIT:
            return UnitInfo(name=name, load_state="not-found", active_state="inactive",
                            sub_state="dead", unit_file_state="")
        raise
    path = str(reply.body[0])
    props = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_UNIT)
    where = f"unit {name}"
    result: str | None = None
    status: int | None = None
    if name.endswith(".service"):
        try:
            service = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_SERVICE)
        except CallError:
            service = {}  # not loaded, so no Service interface
        result = optional(service, "Result", str)
        status = optional(service, "ExecMainStatus", int)
    return UnitInfo(
        name=name,
        load_state=value(props, "LoadState", str, where),
        active_state=value(props, "ActiveState", str, where),
        sub_state=value(props, "SubState", str, where),
        unit_file_state=value(props, "UnitFileState", str, where),
        result=result,
        exec_main_status=status,
    )


@dataclass(frozen=True, slots=True)
class JobEnd:
    """A job systemd removed (Manager.JobRemoved): its unit and how it ended."""

    id: int
    unit: str
    result: str  # done | canceled | timeout | failed | dependency | skipped


async def watch_jobs(session: Session) -> None:
    """Hear systemd's JobRemoved from now on; systemd sends it only to subscribed clients."""
    await session.watch(SYSTEMD_NAME, SYSTEMD_MANAGER, "JobRemoved")
    await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "Subscribe", expect="")


async def job_removed(session: Session, unit: str) -> JobEnd:
    """Wait for the end of a job of ``unit`` (after :func:`watch_jobs`)."""
    while True:
        signal = await session.next_signal()
        if signal.member != "JobRemoved" or len(signal.body) != 4:
            continue
        job_id, _path, name, result = signal.body
        if name == unit:
            return JobEnd(id=int(job_id), unit=str(name), result=str(result))
