"""A transient unit (``systemd-run``): what it is made of, read before the drain, and made again.

systemd unloads a transient unit once it is inactive, so a stopped one
cannot be started again by name: restore hands what was read of it
(kept in the state folder across the sleep) back to ``StartTransientUnit``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from suspendguard.model import Unavailable
from suspendguard.system import deadline
from suspendguard.system.dbus.bus import DEFAULT_TIMEOUT, Session, converse, optional, value, variant
from suspendguard.system.dbus.systemd import (
    START_ANSWER_S,
    SYSTEMD_MANAGER,
    SYSTEMD_NAME,
    SYSTEMD_PATH,
    SYSTEMD_SERVICE,
    SYSTEMD_UNIT,
    job_end,
    load_unit,
)


@dataclass(frozen=True, slots=True)
class TransientSpec:
    """What a transient unit (systemd-run) is made of, as far as the guard can make it again.

    Read from the running unit before its holders are signalled, written to
    the state folder across the sleep, handed back to StartTransientUnit.
    """

    description: str
    exec_start: tuple[tuple[str, tuple[str, ...], bool], ...]  # path, argv, ignore failure
    environment: tuple[str, ...]
    working_directory: str
    user: str
    group: str
    restart: str
    restart_usec: int
    slice: str
    service_type: str
    kill_mode: str
    kill_signal: int
    # "inactive-or-failed": unloaded when it failed too (systemd's default keeps a failed
    # unit loaded until reset-failed, and refuses a new one of the same name meanwhile).
    collect_mode: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description,
                "exec_start": [[p, list(a), i] for p, a, i in self.exec_start],
                "environment": list(self.environment), "working_directory": self.working_directory,
                "user": self.user, "group": self.group, "restart": self.restart,
                "restart_usec": self.restart_usec, "slice": self.slice,
                "service_type": self.service_type, "kill_mode": self.kill_mode,
                "kill_signal": self.kill_signal}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TransientSpec:
        return cls(str(data["description"]),
                   tuple((str(p), tuple(str(x) for x in a), bool(i))
                         for p, a, i in data["exec_start"]),
                   tuple(str(e) for e in data["environment"]), str(data["working_directory"]),
                   str(data["user"]), str(data["group"]), str(data["restart"]),
                   int(data["restart_usec"]), str(data["slice"]), str(data["service_type"]),
                   str(data["kill_mode"]), int(data["kill_signal"]))

    def properties(self) -> list[list[Any]]:
        """StartTransientUnit's ``a(sv)``; empty settings are left to systemd's defaults."""
        props: list[list[Any]] = [
            ["Description", variant("s", self.description)],
            ["ExecStart", variant("a(sasb)", [[p, list(a), i] for p, a, i in self.exec_start])],
            ["Environment", variant("as", list(self.environment))],
            ["Restart", variant("s", self.restart)],
            ["RestartUSec", variant("t", self.restart_usec)],
            ["KillSignal", variant("i", self.kill_signal)],
        ]
        for name, text in (("WorkingDirectory", self.working_directory), ("User", self.user),
                           ("Group", self.group), ("Slice", self.slice),
                           ("Type", self.service_type), ("KillMode", self.kill_mode),
                           ("CollectMode", self.collect_mode)):
            if text:
                props.append([name, variant("s", text)])
        return props


def transient_spec(name: str, timeout: float = DEFAULT_TIMEOUT,
                   address: str | None = None) -> TransientSpec | Unavailable:
    """What systemd says a transient service is made of (see :class:`TransientSpec`)."""

    async def body(session: Session) -> TransientSpec:
        reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER, "LoadUnit",
                                   "s", [name], expect="o")
        path = str(reply.body[0])
        unit = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_UNIT)
        service = await session.get_all(SYSTEMD_NAME, path, SYSTEMD_SERVICE)
        where = f"unit {name}"
        # ExecStart: a(sasbttttuii), the command and then its last run's times and status.
        commands = tuple((str(c[0]), tuple(str(a) for a in c[1]), bool(c[2]))
                         for c in value(service, "ExecStart", list, where))
        return TransientSpec(
            description=optional(unit, "Description", str) or "",
            exec_start=commands,
            environment=tuple(str(e) for e in optional(service, "Environment", list) or ()),
            working_directory=optional(service, "WorkingDirectory", str) or "",
            user=optional(service, "User", str) or "", group=optional(service, "Group", str) or "",
            restart=optional(service, "Restart", str) or "no",
            restart_usec=optional(service, "RestartUSec", int) or 0,
            slice=optional(service, "Slice", str) or "",
            service_type=optional(service, "Type", str) or "",
            kill_mode=optional(service, "KillMode", str) or "",
            kill_signal=optional(service, "KillSignal", int) or 15)

    return converse("systemd", timeout, body, address)


def start_transient(name: str, spec: TransientSpec, timeout: float = 10.0,
                    address: str | None = None) -> str | Unavailable:
    """Make the transient unit again and start it; its ActiveState once the start job ended,
    "starting" when it still ran as the wait (cut to the guard's deadline) ended."""
    limit = deadline.cap(timeout)

    async def body(session: Session) -> str:
        until = asyncio.get_running_loop().time() + max(0.0, limit - START_ANSWER_S)
        reply = await session.call(SYSTEMD_NAME, SYSTEMD_PATH, SYSTEMD_MANAGER,
                                   "StartTransientUnit", "ssa(sv)a(sa(sv))",
                                   [name, "fail", spec.properties(), []], expect="o")
        if not await job_end(session, str(reply.body[0]), until):
            return "starting"
        return (await load_unit(session, name)).active_state

    return converse("systemd", limit, body, address)
