"""User services (``user@UID.service``): kept down, watched and started again through their user's manager.

The same as a system service's: a drain drop-in (``Restart=no``, the drain
signal as ``KillSignal=``, supervise/dropin.py) in the user's runtime unit
folder ``/run/user/UID/systemd/user/UNIT.d/`` and one ``daemon-reload`` of
that manager before the guard signals the holders itself. The manager is
asked over its private socket with the system manager's calls
(system/dbus/systemd.py); the files are written as the user
(supervise/usermanager.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from itertools import groupby

from suspendguard.model import NoAnswer, Owner, Unavailable
from suspendguard.supervise import usermanager
from suspendguard.supervise.dropin import (
    DROPIN_NAME,
    FORMER_NAMES,
    MARKER_NAME,
    dropin_text,
    stop_timeout,
    unanswered_reload,
)
from suspendguard.system.dbus import systemd
from suspendguard.system.dbus.bus import DEFAULT_TIMEOUT, Session, converse, optional
from suspendguard.system.dbus.systemd import AfterStop, ServiceState


def by_uid(owners: Sequence[Owner]) -> list[tuple[int, list[Owner]]]:
    """The owners by their manager's uid (one whose uid is not known has none to ask)."""
    known = sorted((o for o in owners if o.uid is not None), key=lambda o: o.uid or 0)
    return [(uid, list(group)) for uid, group in groupby(known, key=lambda o: o.uid or 0)]


def inactive_since(name: str, address: str | None) -> float:
    """When the unit last went down (its InactiveEnterTimestampMonotonic, on the monotonic
    clock, which stops while the machine sleeps), asked of the
    manager at ``address`` (a user's, or the system's: None); 0 when unknown."""
    async def body(session: Session) -> float:
        unit = await session.call(systemd.SYSTEMD_NAME, systemd.SYSTEMD_PATH,
                                  systemd.SYSTEMD_MANAGER, "LoadUnit", "s", [name], expect="o")
        props = await session.get_all(systemd.SYSTEMD_NAME, str(unit.body[0]),
                                      systemd.SYSTEMD_UNIT)
        return (optional(props, "InactiveEnterTimestampMonotonic", int) or 0) / 1e6

    since = converse("systemd", DEFAULT_TIMEOUT, body, address)
    return 0.0 if isinstance(since, Unavailable) else since


def _address(uid: int | None) -> str | Unavailable:
    if uid is None:
        return Unavailable("the user manager's uid is not known")
    return usermanager.manager_address(uid)


class UserServices:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.warnings: list[str] = []

    def folder(self, owner: Owner) -> str:
        """The owner's drop-in folder in its user's runtime unit folder."""
        return os.path.join(usermanager.unit_dir(owner.uid or 0), f"{owner.name}.d")

    def states(self, owner: Owner) -> dict[str, ServiceState] | Unavailable:
        address = _address(owner.uid)
        if isinstance(address, Unavailable):
            return address
        return systemd.service_states([owner.name], address=address)

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float) -> dict[str, str]:
        """Write the drop-ins, one reload per user; for each key "" when in force, else why not."""
        out = {o.key: "the user manager's uid is not known" for o in owners if o.uid is None}
        for uid, group in by_uid(owners):
            queued = []
            for o in group:
                folder = self.folder(o)
                marker = os.path.join(folder, MARKER_NAME)
                text = dropin_text(signame, marker, stop_timeout(o.timeout_stop_s, timeout_s))
                failed = usermanager.write_file(uid, marker, "") or usermanager.write_file(
                    uid, os.path.join(folder, DROPIN_NAME), text)
                if failed is not None:
                    out[o.key] = f"cannot write the drain drop-in for {o.name}: {failed.reason}"
                else:
                    queued.append(o)
            if not queued:
                continue
            answer = self.reload(uid)
            if isinstance(answer, NoAnswer):
                self.warnings.append(unanswered_reload(f" of uid {uid}", queued, answer))
                answer = None
            if answer is not None:
                self.remove_dropins(queued)  # a drop-in never outlives a reload that failed
            for o in queued:
                out[o.key] = answer.reason if answer is not None else ""
        return out

    def after_stop(self, owners: Sequence[Owner], until: float
                   ) -> dict[str, AfterStop] | Unavailable:
        """Each owner (by key) once it finished stopping, or ``until`` passed."""
        out: dict[str, AfterStop] = {}
        for uid, group in by_uid(owners):
            address = _address(uid)
            if isinstance(address, Unavailable):
                return address
            states = systemd.after_stop({o.name: o.triggered_by for o in group},
                                        max(0.0, until - self.clock()), address=address)
            if isinstance(states, Unavailable):
                return states
            out.update({o.key: states[o.name] for o in group})
        return out

    def started_meanwhile(self, owner: Owner) -> bool:
        """Whether the unit was started since the guard stopped it (its marker is gone)."""
        if owner.uid is None:
            return False
        folder = self.folder(owner)
        dropin, marker = os.path.join(folder, DROPIN_NAME), os.path.join(folder, MARKER_NAME)
        found = usermanager.existing(owner.uid, [dropin, marker])
        return not isinstance(found, Unavailable) and dropin in found and marker not in found

    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]:
        removed = []
        for uid, group in by_uid(owners):
            dropins = [os.path.join(self.folder(o), name) for o in group
                       for name in (DROPIN_NAME, *FORMER_NAMES)]
            markers = [os.path.join(self.folder(o), MARKER_NAME) for o in group]
            gone = usermanager.remove_files(uid, [*dropins, *markers])
            if isinstance(gone, Unavailable):
                self.warnings.append(
                    f"the drain drop-in of {', '.join(dict.fromkeys(o.name for o in group))} "
                    f"(uid {uid}) could not be removed ({gone.reason}): remove "
                    f"{usermanager.unit_dir(uid)}/UNIT.d/{DROPIN_NAME} by hand")
            else:
                removed += [p for p in dropins if p in gone]
        return removed

    def reload(self, uid: int) -> Unavailable | None:
        address = _address(uid)
        if isinstance(address, Unavailable):
            return address
        return systemd.reload_manager(address=address)

    def start(self, owner: Owner, wait: bool) -> str | Unavailable:
        address = _address(owner.uid)
        if isinstance(address, Unavailable):
            return address
        return systemd.start_unit(owner.name, address=address, wait=wait)
