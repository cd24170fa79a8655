"""The drain drop-in: what a supervised unit runs under while the guard drains its holders.

Written beside the unit's other drop-ins (``UNIT.d/``) and applied with one
daemon reload before any holder is signalled; removed when the guard
starts the unit again. ``Restart=no`` keeps systemd from starting the job
again once its holders exit (systemd 252 applies it to the running
service on reload). ``KillSignal=`` is the drain signal and
``TimeoutStopSec=`` is raised to ``[drain] timeout_s`` where it was
shorter: what systemd sends to the unit's leftover processes once its main
process exited, and when it escalates to SIGKILL, must not be harsher or
sooner than the guard's own drain.

The marker beside it (systemd reads only ``*.conf`` there) is removed by
any start of the unit while the drop-in is in place, so restore can tell
that someone started it after the guard stopped it (systemd 252 keeps no
trace of a run that has ended: its InvocationID and ExecMainPID are reset).
The ``+`` prefix runs that removal with full privileges, whatever the unit's
``User=``, ``DynamicUser=``, ``ProtectSystem=`` or ``PrivateTmp=``; the
path is escaped because systemd unescapes command lines (a unit named
``a\\x2db.service`` has that backslash in its folder's name) and expands
``%`` specifiers in them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from suspendguard.model import Owner, Unavailable

# systemd applies a unit's drop-ins in the order of their file names, the last one's value
# winning: the drain's must sort after an admin's own (systemctl edit writes override.conf,
# and sites number theirs up to 99-), or their Restart= and KillSignal= win.
DROPIN_NAME = "zz-suspendguard-drain.conf"
FORMER_NAMES = ("50-suspendguard-drain.conf",)  # an earlier version's: removed alike
MARKER_NAME = "suspendguard-stopped"


def exec_path(path: str) -> str:
    """``path`` as one word of a unit's command line that systemd turns back into ``path``."""
    return path.replace("\\", "\\\\").replace("%", "%%")


def dropin_text(signame: str, marker: str, timeout_stop_s: float | None = None) -> str:
    """``timeout_stop_s``: a ``TimeoutStopSec=`` for the drain (None: the unit's own)."""
    timeout = "" if timeout_stop_s is None else f"TimeoutStopSec={math.ceil(timeout_stop_s)}s\n"
    return ("# Written by suspendguard for one drain; removed when the job is started "
            f"again.\n[Service]\nRestart=no\nRestartForceExitStatus=\nKillSignal={signame}\n"
            f"{timeout}"
            f"ExecStartPre=-+/bin/rm -f {exec_path(marker)}\n")


def stop_timeout(unit_timeout_s: float, timeout_s: float) -> float | None:
    """The ``TimeoutStopSec=`` a unit drains under: the drain's wait when the unit's is shorter.

    ``unit_timeout_s``: the unit's own, 0 when infinite or unknown (kept).
    """
    return timeout_s + 1.0 if 0 < unit_timeout_s < timeout_s else None


def unanswered_reload(manager: str, owners: Sequence[Owner], answer: Unavailable) -> str:
    """The warning of a daemon-reload sent and not answered in time: the manager may apply
    it yet, so the drop-ins stay and the stops are kept on record, for restore to undo; a
    unit started again meanwhile is caught as any is."""
    names = ", ".join(o.name for o in owners)
    return (f"the daemon-reload{manager} before the drain did not answer ({answer.reason}): "
            f"systemd may still apply it, so {names} keep the drain drop-in and are kept on "
            "record, for restore to start again and undo")
