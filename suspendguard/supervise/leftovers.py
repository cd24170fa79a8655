"""What a killed guard run leaves behind, found and put back by the next one.

A run killed between its drain drop-in and the stop (or before restore)
leaves ``UNIT.d/zz-suspendguard-drain.conf`` in place, so every later stop
of that unit sends the drain signal; one killed after it set a container's
restart policy aside leaves the container without it. Every guard run that
may signal looks for both before anything else, while it holds the guard
lock: no other run can be between its stop and its restore then.
"""

from __future__ import annotations

import glob
import os

from suspendguard.model import Owner
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
