"""What a killed guard run leaves behind, found and put back by the next one.

A run killed between its drain drop-in and the stop (or before restore)
leaves ``UNIT.d/zz-suspendguard-drain.conf`` in place, so every later stop
of that unit sends the drain signal; one killed after it set a container's
restart policy aside leaves the container without it. Every guard run that
may signal looks for both before anything else, while it holds the guard
lock: no other run can be between its stop and its restore then. What a stop
the history has held (its device unhealthy after resume), or pending after an
attempt that ended with its verdict (a restore's budget ended before it),
keeps down is not a killed run's: the next restore puts it back, and it
stays until then.
"""

from __future__ import annotations

import glob
import os

from suspendguard.errors import HistoryError
from suspendguard.model import Owner
from suspendguard.store.history import History
from suspendguard.supervise import usermanager
from suspendguard.supervise.dropin import DROPIN_NAME, FORMER_NAMES


def system_dropins(dropin_root: str) -> list[str]:
    """The units under ``dropin_root`` that carry a drain drop-in."""
    paths = [p for name in (DROPIN_NAME, *FORMER_NAMES)
             for p in glob.glob(os.path.join(glob.escape(dropin_root), "*.d", name))]
    return sorted({os.path.basename(os.path.dirname(p))[:-2] for p in paths})


def user_dropins() -> list[Owner]:
    """The user services that carry a drain drop-in in their user's runtime unit folder."""
    folders = os.path.join(usermanager.unit_dir(0).replace("/0/", "/*/", 1), "*.d")
    out = []
    for path in sorted({p for name in (DROPIN_NAME, *FORMER_NAMES)
                        for p in glob.glob(os.path.join(folders, name))}):
        uid = path.split("/")[3]
        if uid.isdigit():
            out.append(Owner("user-service", os.path.basename(os.path.dirname(path))[:-2],
                             uid=int(uid)))
    return out


def restores_own(state_dir: str | None) -> frozenset[str]:
    """The owners the next restore puts back, by key: those of the stops the history has held
    (after resume, a device unhealthy), or pending in an attempt that ended with its verdict
    (a restore's budget ended before their turn). Their drop-ins, markers and policies set
    aside are not a killed run's: they stay until that restore. (That restore took the
    drop-ins and markers of its own units away before its first start, and recorded as
    skipped those it did not reach whose marker said someone else had started them.)

    A killed run's stops (its attempt interrupted) are pending too, and theirs go as before;
    and all go when the history cannot be read, for a restore that cannot read it either
    would leave them in force for good.
    """
    if state_dir is None:
        return frozenset()
    try:
        with History.open(state_dir, readonly=True) as history:
            stops = history.pending_stops()
            ended = {i for i in {s.attempt_id for s in stops}
                     if (a := history.attempt(i)) is not None and a.state == "done"}
    except HistoryError:  # none yet, or unreadable
        return frozenset()
    return frozenset(s.owner.key for s in stops if s.result == "held" or s.attempt_id in ended)

