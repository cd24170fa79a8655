"""The pyACL probe, run as a short-lived child by the acl backend.

Kept out of the guard's own process because pyACL registers the process
with the device runtime: the guard must never hold the device itself, and a
child that finalizes and exits leaves nothing behind, even if it crashes.
By default it only reads: it never calls acl.rt.set_device, which would
create a context ON the device. With SUSPENDGUARD_ACL_MODE=open (the health
check after resume, while the drained jobs are still stopped) it opens each
device and resets it again, as a job starting would. Prints one JSON object on stdout and exits 0 when it
could ask at all; stdlib only apart from ``acl``. An ``error`` is the runtime's (acl.init(), the
device count) unless ``unavailable`` is true: then ``acl`` could not be imported (no CANN).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

# Field names of the dict acl.rt.get_device_utilization_rate returns, and the
# readings they become. memory_utilization is memory in use, not activity.
FIELDS = {
    "cube_utilization": "cube_pct",
    "vector_utilization": "vector_pct",
    "aicpu_utilization": "aicpu_pct",
    "memory_utilization": "memory_pct",
}


def _each_device(ask: Callable[[Any, int], dict[str, Any]]) -> dict[str, Any]:
    """``ask(acl, device)`` for each device between acl.init() and acl.finalize()."""
    try:
        # Only here, in the child: ``acl`` exists once set_env.sh has put the
        # toolkit on the path, and importing it registers with the runtime.
        import acl
    except ImportError as exc:
        # No CANN here: nothing is said of the device, apart from a runtime that fails.
        return {"error": f"cannot import acl ({exc}); is [idle] ascend_env the CANN set_env.sh?",
                "unavailable": True}
    ret = acl.init()
    if ret != 0:
        return {"error": f"acl.init() returned {ret}"}
    try:
        count, ret = acl.rt.get_device_count()
        if ret != 0:
            return {"error": f"acl.rt.get_device_count() returned {ret}"}
        return {"devices": [ask(acl, dev) for dev in range(count)]}
    finally:
        acl.finalize()


def _utilization(acl: Any, dev: int) -> dict[str, Any]:
    info, ret = acl.rt.get_device_utilization_rate(dev)
    entry: dict[str, Any] = {"device": dev, "ret": ret}
    if ret == 0 and isinstance(info, dict):
        for field, key in FIELDS.items():
            value = info.get(field)
            # -1 is pyACL's "not supported on this device"
            entry[key] = None if value is None or value < 0 else float(value)
    return entry


def _open(acl: Any, dev: int) -> dict[str, Any]:
    """aclrtSetDevice then aclrtResetDevice: does the device open after resume?"""
    ret = acl.rt.set_device(dev)
    if ret == 0:
        acl.rt.reset_device(dev)
    return {"device": dev, "ret": ret}


def probe() -> dict[str, Any]:
    return _each_device(_utilization)


def open_devices() -> dict[str, Any]:
    return _each_device(_open)


def main() -> int:
    opened = os.environ.get("SUSPENDGUARD_ACL_MODE") == "open"
    json.dump(open_devices() if opened else probe(), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
