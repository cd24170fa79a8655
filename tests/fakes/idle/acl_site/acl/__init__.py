"""A stand-in for the CANN toolkit's pyACL module ``acl``, same call shapes.

Loaded in the pyACL probe's child through the fake set_env.sh, which puts
this directory on PYTHONPATH. Scripted by the JSON file $FAKE_ACL_STATE:
  {"init": 0, "count": 1, "count_ret": 0,
   "devices": [{"cube_utilization": 0, "vector_utilization": 0,
                "aicpu_utilization": 0, "memory_utilization": 12, "ret": 0}],
   "mode": "" | "hang" | "crash" | "noise" | "hold",
   "hold": NODE, "until": FILE}
``hold``: init opens NODE and keeps it open until FILE exists (10 s at most), as a
real runtime holds the device while it is initialised.
Every call is appended to $FAKE_ACL_LOG. ``rt.set_device`` (which would put
a context on a real device) writes $FAKE_ACL_SET_DEVICE_MARKER and kills the
process, so an idle probe that ever calls it fails the test; only a state
with "open" (the health check's device open after resume: a list of the
answers, one per device) lets it answer.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

_HELD: list[Any] = []


def _state() -> dict[str, Any]:
    with open(os.environ["FAKE_ACL_STATE"]) as f:
        value: dict[str, Any] = json.load(f)
    return value


def _log(call: str) -> None:
    path = os.environ.get("FAKE_ACL_LOG")
    if path:
        with open(path, "a") as f:
            f.write(call + "\n")


def init(config_path: str | None = None) -> int:
    _log("init")
    state = _state()
    mode = state.get("mode", "")
    if mode == "hang":
        time.sleep(3600)
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "noise":
        print("[INFO] ACL: some runtime chatter on stdout")
    if mode == "hold":
        _HELD.append(open(state["hold"], "rb"))  # noqa: SIM115 - held as a runtime would
        until = time.monotonic() + 10
        while not os.path.exists(state["until"]) and time.monotonic() < until:
            time.sleep(0.02)
    return int(state.get("init", 0))


def finalize() -> int:
    _log("finalize")
    return 0


class rt:  # pyACL's own spelling: acl.rt.get_device_count()
    @staticmethod
    def get_device_count() -> tuple[int, int]:
        _log("rt.get_device_count")
        state = _state()
        count = int(state.get("count", len(state.get("devices", []))))
        # As the runtime does: a process sees only the devices the variable names.
        visible = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
        if visible is not None:
            count = len([d for d in visible.split(",") if d.strip().isdigit()])
        return count, int(state.get("count_ret", 0))

    @staticmethod
    def get_device_utilization_rate(device_id: int) -> tuple[dict[str, int], int]:
        _log(f"rt.get_device_utilization_rate {device_id}")
        device = dict(_state()["devices"][device_id])
        ret = int(device.pop("ret", 0))
        return (device if ret == 0 else {}), ret

    @staticmethod
    def get_run_mode() -> tuple[int, int]:
        _log("rt.get_run_mode")
        return 1, 0

    @staticmethod
    def set_device(device_id: int) -> int:
        _log(f"rt.set_device {device_id}")
        answers = _state().get("open")
        if isinstance(answers, list):
            return int(answers[device_id])
        marker = os.environ.get("FAKE_ACL_SET_DEVICE_MARKER")
        if marker:
            with open(marker, "w") as f:
                f.write(f"set_device({device_id}) was called\n")
        os._exit(97)

    @staticmethod
    def reset_device(device_id: int) -> int:
        _log(f"rt.reset_device {device_id}")
        return 0
