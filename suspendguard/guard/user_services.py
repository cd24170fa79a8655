"""User services (``user@UID.service``): kept down, watched and started again through their user's manager.

The same as a system service's: a drain drop-in (``Restart=no``, the drain
signal as ``KillSignal=``, guard/dropin.py) in the user's runtime unit
folder ``/run/user/UID/systemd/user/UNIT.d/`` and one ``daemon-reload`` of
that manager before the guard signals the holders itself. Every call goes
to the user's own manager as that user (system/usermanager.py): it takes
orders from no one else.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from itertools import groupby

from suspendguard.guard.dropin import DROPIN_NAME, MARKER_NAME, dropin_text, stop_timeout
from suspendguard.model import Owner, Unavailable
from suspendguard.system import usermanager
from suspendguard.system.dbus.systemd import AfterStop, ServiceState


def _by_uid(owners: Sequence[Owner]) -> list[tuple[int, list[Owner]]]:
    known = sorted((o for o in owners if o.uid is not None), key=lambda o: o.uid or 0)
    return [(uid, list(group)) for uid, group in groupby(known, key=lambda o: o.uid or 0)]


class UserServices:
    def __init__(self, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.clock = clock
        self.sleep = sleep

    def _folder(self, owner: Owner) -> str:
        return os.path.join(usermanager.unit_dir(owner.uid or 0), f"{owner.name}.d")

    def states(self, owner: Owner) -> dict[str, ServiceState] | Unavailable:
        if owner.uid is None:
            return Unavailable("the user manager's uid is not known")
        return usermanager.service_states(owner.uid, [owner.name])

    def stop(self, owners: Sequence[Owner], signame: str, timeout_s: float) -> dict[str, str]:
        """Write the drop-ins, one reload per user; for each key "" when in force, else why not."""
        out = {o.key: "the user manager's uid is not known" for o in owners if o.uid is None}
        for uid, group in _by_uid(owners):
            queued = []
            for o in group:
                folder = self._folder(o)
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
            answer = usermanager.reload(uid)
            if answer is not None:
                self.remove_dropins(queued)  # a drop-in never outlives a reload that failed
            for o in queued:
                out[o.key] = answer.reason if answer is not None else ""
        return out

    def after_stop(self, owners: Sequence[Owner], until: float
                   ) -> dict[str, AfterStop] | Unavailable:
        """Each owner (by key) once it finished stopping, or ``until`` passed."""
        out: dict[str, AfterStop] = {}
        for uid, group in _by_uid(owners):
            states = usermanager.after_stop(uid, {o.name: o.triggered_by for o in group}, until,
                                            self.clock, self.sleep)
            if isinstance(states, Unavailable):
                return states
            out.update({o.key: states[o.name] for o in group})
        return out

    def started_meanwhile(self, owner: Owner) -> bool:
        """Whether the unit was started since the guard stopped it (its marker is gone)."""
        if owner.uid is None:
            return False
        folder = self._folder(owner)
        dropin, marker = os.path.join(folder, DROPIN_NAME), os.path.join(folder, MARKER_NAME)
        found = usermanager.existing(owner.uid, [dropin, marker])
        return not isinstance(found, Unavailable) and dropin in found and marker not in found

    def remove_dropins(self, owners: Sequence[Owner]) -> list[str]:
        removed = []
        for uid, group in _by_uid(owners):
            dropins = [os.path.join(self._folder(o), DROPIN_NAME) for o in group]
            markers = [os.path.join(self._folder(o), MARKER_NAME) for o in group]
            gone = usermanager.remove_files(uid, [*dropins, *markers])
            if not isinstance(gone, Unavailable):
                removed += [p for p in dropins if p in gone]
        return removed

    def reload(self, uid: int) -> Unavailable | None:
        return usermanager.reload(uid)

    def start(self, owner: Owner, wait: bool) -> str | Unavailable:
        if owner.uid is None:
            return Unavailable("the user manager's uid is not known")
        return usermanager.start(owner.uid, owner.name, wait)
