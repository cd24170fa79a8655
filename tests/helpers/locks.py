"""The guard lock held by another process, as a drain or a restore in progress holds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TAKE = ("import sys, time\nfrom suspendguard.store import lock\n"
        "held = lock.take(sys.argv[1], 0.0)\nassert not held.refused, held.refused\n"
        "print('held', flush=True)\ntime.sleep(60)\n")


def hold_guard_lock(state: Path, children: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """A child holding ``state``'s guard lock (the real one) until it is killed; added to
    ``children`` (the plugin's fixture), which ends it after the test."""
    holder = subprocess.Popen([sys.executable, "-c", TAKE, str(state)],
                              stdout=subprocess.PIPE, text=True)
    children.append(holder)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder
