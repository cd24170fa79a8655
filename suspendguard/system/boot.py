"""Which boot this is, named the same inside a unit's sandbox and outside it, and
across a step of the clock.

A stop is kept with the boot it was made in, and restore leaves down a stop
of an earlier boot. A stop keeps two names of its boot, and a stop is of this
boot when either is this boot's:

- the kernel's boot time (``/proc/stat``'s btime) with the start of this PID
  namespace's init: the same inside any sandbox of one PID namespace. But
  btime is worked out from the wall clock at each read, so a step of the
  clock (timesyncd after a resume; an RTC that drifted while the host slept)
  moves it;
- ``/proc/sys/kernel/random/boot_id``, which no clock step moves and which
  survives a suspend and a hibernation. systemd-nspawn gives a container its
  own by mounting a file over that one, which a unit's sandbox
  (``ProtectKernelTunables=``, a procfs of its own) does not see: the veto
  unit and a root shell read different ids in the same boot, and the first
  name answers for it there.
"""

from __future__ import annotations

import os
import time

from suspendguard.system.procfs import ProcAccessError, ProcFS


def boot_id(proc: ProcFS) -> str:
    """This boot's names as a stop keeps them: "BTIME.START KERNEL-ID", each left out
    where it cannot be read; "" when neither can."""
    return " ".join(b for b in (_btime_start(proc), kernel_boot_id(proc)) if b)


def _btime_start(proc: ProcFS) -> str:
    """"BTIME.START"; "" when it cannot be read."""
    try:
        with open(f"{proc.root}/stat", "rb") as f:
            btime = next((line.split()[1] for line in f if line.startswith(b"btime ")), b"")
        init = proc.stat(1)
    except (OSError, IndexError, ProcAccessError):
        return ""
    if not btime.isdigit() or init is None:
        return ""
    return f"{btime.decode()}.{init.start_time}"


def kernel_boot_id(proc: ProcFS) -> str:
    """``sys/kernel/random/boot_id`` (what a version before "BTIME.START" kept alone)."""
    try:
        with open(f"{proc.root}/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return ""


def boot_ids(proc: ProcFS) -> frozenset[str]:
    """Every name of this boot, each alone: "BTIME.START" and the kernel's id."""
    return frozenset(boot_id(proc).split())


def ticks_now(ago_s: float = 0.0) -> int:
    """Now (or ``ago_s`` seconds ago) on the clock of a process's start time in
    /proc/PID/stat: clock ticks since boot, a suspend included (CLOCK_BOOTTIME)."""
    return int((time.clock_gettime(time.CLOCK_BOOTTIME) - ago_s) * os.sysconf("SC_CLK_TCK"))


def slept_s() -> float:
    """How long this machine has been asleep since it booted: CLOCK_BOOTTIME counts the
    sleeps, CLOCK_MONOTONIC does not. Taken twice, the difference is the sleep between."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic()
