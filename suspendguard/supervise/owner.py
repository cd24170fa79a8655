"""Who runs a holder: a systemd service, a user service, a container engine, a pod, nobody.

Read from the holder's cgroup path (every supervisor puts its jobs in a
cgroup of its own, under names the supervisor chooses), then filled in from
the supervisor's own API (supervise/managers.py's ManagersAndEngines): the unit's ``Restart=`` and
``RestartUSec`` over D-Bus, the container's restart policy from the engine.
The owner itself is plain data (``Owner`` in suspendguard/model.py), as is
the record of a stop (``Stop`` in suspendguard/record.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from suspendguard.model import PLAIN, Holder, Owner, Unavailable
from suspendguard.record import Stop
from suspendguard.system.deadline import Deadline

# Docker: cgroupfs driver /docker/ID, systemd driver docker-ID.scope.
_DOCKER = (re.compile(r"/docker/([0-9a-f]{64})(?:/|$)"),
           re.compile(r"/docker-([0-9a-f]{64})\.scope(?:/|$)"))
# Podman: libpod-ID.scope (systemd manager), libpod-ID (cgroupfs); rootless ones are the user's.
_PODMAN = re.compile(r"/libpod-([0-9a-f]{64})(?:\.scope)?(?:/|$)")
# Kubernetes: the pod's slice (systemd driver, dashes of the uid written as
# underscores) or folder (cgroupfs driver), then the runtime's container.
_POD = (re.compile(r"kubepods(?:-[a-z]+)?-pod([0-9a-f_]{36})\.slice"),
        re.compile(r"/kubepods(?:/[a-z]+)?/pod([0-9a-f-]{36})(?:/|$)"))
_POD_CONTAINER = re.compile(r"(?:cri-containerd-|crio-|docker-)?([0-9a-f]{64})(?:\.scope)?$")
_USER_MANAGER = re.compile(r"/user@(\d+)\.service(?:/|$)")
# A launcher the drain left running (a unit's main process, a container's PID 1), down at
# restore, and later than it would have exited on its own once it noticed its job's end.
STOPPED_LATER = ("it stayed up through the drain (only its job was drained) and was stopped "
                 "by someone else after the drain")


@dataclass(frozen=True, slots=True)
class UnitNow:
    """A unit's state when restore looks at it."""

    load_state: str
    active_state: str
    job: str  # the type of the job queued for it, "" when none
    # Down now, and the end of a drain saw it running, its main process not the job: (that
    # stop's time, when seen); and when it went down (InactiveEnterTimestampMonotonic, 0:
    # unknown). Both on the monotonic clock: hours asleep are no time for a launcher to notice.
    up_after_drain: tuple[float | None, float] | None = None
    inactive_since: float = 0.0


@dataclass(frozen=True, slots=True)
class NotMade(Unavailable):
    """A transient unit that could not be made again (StartTransientUnit refused, or not
    answered): its record is kept, for the next restore to try again."""


class OwnerControl(Protocol):
    """What the pipeline and restore ask of the holders' supervisors: read, keep down, start.

    supervise/managers.py's ManagersAndEngines answers it through the systemd
    managers and the container engines. A protocol here so that the pipeline
    does not import the D-Bus client with it: tests hand it stand-ins of their own.
    """

    def owner(self, holder: Holder) -> Owner: ...
    def stop(self, owners: Sequence[Owner], signame: str,
             timeout_s: float = 10.0) -> dict[str, str]: ...
    def settle(self, stops: Sequence[Stop], deadline: Deadline) -> list[str]: ...
    def started_meanwhile(self, owner: Owner) -> bool: ...
    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]: ...
    def reload(self, owners: Sequence[Owner]) -> Unavailable | None: ...
    def unit_now(self, owner: Owner) -> UnitNow | Unavailable: ...
    def start(self, owner: Owner, wait: bool = True) -> str | Unavailable: ...
    def start_container(self, owner: Owner, stopped_at: float | None) -> tuple[str, str]: ...
    def recreate(self, owner: Owner) -> str | Unavailable | None: ...
    def take_warnings(self) -> list[str]: ...
    def clean_leftovers(self) -> list[str]: ...


def owner_of_cgroup(cgroup: str | None) -> Owner:
    """The owner a cgroup path names; ``plain`` when no supervisor's name is in it."""
    if not cgroup:
        return PLAIN
    path = "/" + cgroup.strip("/")
    # A user's own manager's tree first: its user may name a cgroup there after any
    # container (ids are in every /proc/PID/cgroup), and root's engine must not act on
    # that one for them. A rootless container is run by the user, and drained as a process.
    user = _USER_MANAGER.search(path)
    machine = _machine(path)
    if user and not (machine and path.index(machine) < user.start()):
        return _user_owner(path)
    for pattern in _POD:
        m = pattern.search(path)
        if m:
            last = path.rsplit("/", 1)[-1]
            cid = _POD_CONTAINER.match(last)
            return Owner("kubernetes", m.group(1).replace("_", "-"),
                         note=f"container {cid.group(1)[:12]}" if cid else "")
    for pattern in _DOCKER:
        m = pattern.search(path)
        if m:
            return Owner("docker", m.group(1))
    m = _PODMAN.search(path)
    if m:
        return Owner("podman", m.group(1))
    parts = path.strip("/").split("/")
    if machine := _machine(path):
        return Owner("plain", note=f"inside machine {machine}")
    # The innermost unit decides: a scope (a login session, systemd-run
    # --scope) has no supervisor that would start it again.
    units = [p for p in parts if p.endswith((".service", ".scope"))]
    if units and units[-1].endswith(".service"):
        return Owner("systemd-service", units[-1])
    return PLAIN


def _machine(path: str) -> str | None:
    """The machine (systemd-nspawn, a VM's scope) whose own manager the units inside belong
    to, not this one's."""
    return next((p for p in path.strip("/").split("/") if p.startswith("systemd-nspawn@")
                 or (p.startswith("machine-") and p.endswith(".scope"))), None)


def _user_owner(path: str) -> Owner:
    """A user service in a user manager's tree, else a plain process (a scope, a container)."""
    user = _USER_MANAGER.search(path)
    assert user is not None
    parts = path.strip("/").split("/")
    if f"user@{user.group(1)}.service" not in parts:
        return PLAIN
    inner = parts[parts.index(f"user@{user.group(1)}.service") + 1:]
    services = [p for p in inner if p.endswith(".service")]
    if services and not any(p.endswith(".scope") for p in inner):
        return Owner("user-service", services[-1], uid=int(user.group(1)))
    return PLAIN
