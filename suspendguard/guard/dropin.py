"""The drain drop-in: the one-stop ``KillSignal=`` a supervised unit gets, and its marker.

Written beside the unit's other drop-ins (``UNIT.d/``) before its stop job
is queued, removed when the guard starts the unit again. The marker beside
it (systemd reads only ``*.conf`` there) is removed by any start of the
unit while the drop-in is in place, so restore can tell that someone
started it after the guard stopped it (systemd 252 keeps no trace of a run
that has ended: its InvocationID and ExecMainPID are reset).
"""

from __future__ import annotations

DROPIN_NAME = "50-suspendguard-drain.conf"
MARKER_NAME = "suspendguard-stopped"


def dropin_text(signame: str, marker: str) -> str:
    return ("# Written by suspendguard for one drain; removed when the job is started "
            f"again.\n[Service]\nKillSignal={signame}\nExecStartPre=-/bin/rm -f {marker}\n")
