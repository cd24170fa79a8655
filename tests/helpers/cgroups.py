"""Cleaning up a cgroup a test made: its processes killed, the folder removed."""

from __future__ import annotations

import contextlib
import os
import signal
import time


def remove_cgroup(path: str) -> None:
    """SIGKILL what is left in the test's own cgroup ``path`` (thawed first), then remove it."""
    with open(os.path.join(path, "cgroup.procs")) as f:
        members = [int(p) for p in f.read().split()]
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.05)
