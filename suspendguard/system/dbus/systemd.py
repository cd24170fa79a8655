"""systemd's manager over D-Bus: how it reports units (the veto units among them),
stops and starts them, and hears its jobs' ends.

A transient unit made again after the sleep is system/dbus/transient.py's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from suspendguard.model import Unavailable
from suspendguard.system import deadline
from suspendguard.system.dbus.bus import (
    DEFAULT_TIMEOUT,
    PROPERTIES,
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
SYSTEMD_JOB = "org.freedesktop.systemd1.Job"
SYSTEMD_TIMER = "org.freedesktop.systemd1.Timer"

_NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"
# What a start's wait leaves of its timeout for the last look and the answer.
START_ANSWER_S = 0.5
# How long a daemon-reload may take (a large host's takes seconds); a guard
# run cuts it to its deadline.
RELOAD_TIMEOUT_S = 30.0


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
        return {name: await load_unit(session, name) for name in wanted}

    return converse("systemd", timeout, body, address)


async def load_unit(session: Session, name: str) -> UnitInfo:
    """The unit as the manager reports it now (loaded for the question when it was not)."""
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
class ServiceState:
    """What the guard needs of a service it may stop and start again."""

    name: str
    load_state: str
    active_state: str
    restart: str  # Restart=: no | always | on-failure | ...
    restart_delay_s: float  # RestartUSec
    kill_mode: str
    exec_stop: bool  # the unit has an ExecStop= command
    triggered_by: tuple[str, ...]
    job: str  # the type of the job queued for it ("start", "stop"...), "" when none
    next_elapse: dict[str, float]  # timer -> NextElapseUSecMonotonic, seconds (CLOCK_MONOTONIC)
    main_pid: int = 0  # MainPID, 0 when none
    timeout_stop_s: float = 0.0  # TimeoutStopUSec; 0 when infinite
    transient: bool = False  # made by StartTransientUnit (systemd-run): unloaded once inactive


# TimeoutStopUSec says "infinity" as the largest 64-bit value.
_INFINITY_USEC = (1 << 64) - 1


async def _service_state(session: Session, name: str) -> ServiceState:
    unit = await load_unit(session, name)
    if not unit.found:
        return ServiceState(name, unit.load_state, "inactive", "", 0.0, "", False, (), "", {})
    reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit",
                               "s", [name], expect="o")
    path = str(reply.body[0])
    props = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_UNIT)
    service = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_SERVICE)
    triggers = tuple(optional(props, "TriggeredBy", list) or ())
    job = optional(props, "Job", list) or [0, "/"]
    job_type = ""
    if job and int(job[0]) != 0:
        try:
            job_props = await session.get_all(SYSTEMD_NAME, str(job[1]), SYSTEMD_JOB)
            job_type = optional(job_props, "JobType", str) or "?"
        except CallError:
            job_type = ""  # finished in between
    stop_usec = optional(service, "TimeoutStopUSec", int) or 0
    elapse: dict[str, float] = {}
    for trigger in triggers:
        if str(trigger).endswith(".timer"):
            t = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit",
                                   "s", [str(trigger)], expect="o")
            tprops = await session.get_all(SYSTEMD_NAME, str(t.body[0]), SYSTEMD_TIMER)
            usec = optional(tprops, "NextElapseUSecMonotonic", int) or 0
            if usec:
                elapse[str(trigger)] = usec / 1e6
    return ServiceState(
        name=name, load_state=unit.load_state, active_state=unit.active_state,
        restart=optional(service, "Restart", str) or "",
        restart_delay_s=(optional(service, "RestartUSec", int) or 0) / 1e6,
        kill_mode=optional(service, "KillMode", str) or "",
        exec_stop=bool(optional(service, "ExecStop", list)),
        triggered_by=tuple(str(t) for t in triggers), job=job_type,
        next_elapse=elapse, main_pid=optional(service, "MainPID", int) or 0,
        timeout_stop_s=0.0 if stop_usec in (0, _INFINITY_USEC) else stop_usec / 1e6,
        transient=bool(optional(props, "Transient", bool)),
    )


def service_states(names: Sequence[str], timeout: float = DEFAULT_TIMEOUT,
                   address: str | None = None) -> dict[str, ServiceState] | Unavailable:
    """Each service's restart settings and state, in one conversation."""
    wanted = tuple(dict.fromkeys(names))

    async def body(session: Session) -> dict[str, ServiceState]:
        return {name: await _service_state(session, name) for name in wanted}

    return converse("systemd", timeout, body, address)


async def job_end(session: Session, job: str, until: float | None = None) -> bool:
    """Wait for the job to end; False when it still runs at ``until`` (the loop's time)."""
    while True:
        try:
            await session.get_all(SYSTEMD_NAME, job, SYSTEMD_JOB)
        except CallError:
            return True  # the job is gone: it has finished
        if until is not None and asyncio.get_running_loop().time() >= until:
            return False
        await asyncio.sleep(0.05)


def reload_manager(timeout: float = RELOAD_TIMEOUT_S,
                   address: str | None = None) -> Unavailable | None:
    """``Manager.Reload``: answered once the manager has read its units again."""
    async def body(session: Session) -> None:
        await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "Reload", expect="")

    return converse("systemd", timeout, body, address)


def start_unit(name: str, timeout: float = 10.0, address: str | None = None, *,
               wait: bool = True) -> str | Unavailable:
    """Start a unit; with ``wait``, wait for its start job to end.

    The answer: the unit's ActiveState once the job ended ("active",
    "failed"...), "queued" when not waiting, or "starting" when the job
    still ran as the wait ended (``timeout``, cut to the guard's deadline):
    a slow start (``Type=notify``, a oneshot) is no failed one.
    """
    limit = deadline.cap(timeout)
    # The last look at the job leaves time for the answer inside the conversation's bound.
    wait_s = max(0.0, limit - START_ANSWER_S)

    async def body(session: Session) -> str:
        until = asyncio.get_running_loop().time() + wait_s
        reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "StartUnit",
                                   "ss", [name, "replace"], expect="o")
        if not wait:
            return "queued"
        if not await job_end(session, str(reply.body[0]), until):
            return "starting"
        return (await load_unit(session, name)).active_state

    return converse("systemd", limit, body, address)


@dataclass(frozen=True, slots=True)
class AfterStop:
    """What a unit does once its stop was asked for: is it down, or coming back."""

    name: str
    active_state: str
    job: str  # the type of the job queued for it, "" when none
    triggered_by: tuple[str, ...]
    next_elapse: dict[str, float]  # timer -> NextElapseUSecMonotonic, seconds (CLOCK_MONOTONIC)

    @property
    def stopping(self) -> bool:
        return self.job == "stop" or self.active_state == "deactivating"


def after_stop(timers: Mapping[str, Sequence[str]], wait_s: float, poll_s: float = 0.005,
               timeout: float = DEFAULT_TIMEOUT, address: str | None = None,
               ) -> dict[str, AfterStop] | Unavailable:
    """Each unit (the keys of ``timers``) once it is no longer stopping, or ``wait_s`` passed.

    ``timers``: each unit's ``.timer`` triggers, whose next elapse is read
    at the end. One conversation, one ``ListUnitsByNames`` call a poll (state
    and job of every unit at once): a :func:`service_states` a poll (every
    property of Unit and Service, a new connection each time) cost 160 ms
    for eight units, all of it between the last holder's exit and the verdict.
    """
    names = list(dict.fromkeys(timers))

    async def body(session: Session) -> dict[str, AfterStop]:
        until = asyncio.get_running_loop().time() + wait_s
        while True:
            reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER,
                                       "ListUnitsByNames", "as", [names],
                                       expect="a(ssssssouso)")
            # name, description, load, active, sub, following, path, job id, type, path
            now = {str(r[0]): (str(r[3]), str(r[8]) if int(r[7]) else "") for r in reply.body[0]}
            stopping = [n for n, (active, job) in now.items()
                        if job == "stop" or active == "deactivating"]
            if not stopping or asyncio.get_running_loop().time() >= until:
                break
            await asyncio.sleep(poll_s)
        out = {}
        for name in names:
            active, job = now.get(name, ("inactive", ""))
            elapse = {t: await _next_elapse(session, t) for t in timers[name]
                      if t.endswith(".timer")}
            out[name] = AfterStop(name, active, job, tuple(timers[name]),
                                  {t: at for t, at in elapse.items() if at})
        return out

    return converse("systemd", timeout + wait_s, body, address)


async def _next_elapse(session: Session, timer: str) -> float:
    """A timer's next elapse, seconds of CLOCK_MONOTONIC; 0 when none."""
    t = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit", "s", [timer],
                           expect="o")
    reply = await session.call(SYSTEMD_NAME, str(t.body[0]), PROPERTIES, "Get", "ss",
                               [SYSTEMD_TIMER, "NextElapseUSecMonotonic"], expect="v")
    return int(reply.body[0].value) / 1e6


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
