"""Whether a signal a process blocks can reach it at all.

A signal blocked in every thread stays pending and is never delivered,
unless a thread waits for it: in sigwait(), sigtimedwait() or sigwaitinfo(),
or by reading a signalfd whose mask has it (``sigmask:`` in
/proc/PID/fdinfo/N). While a thread sleeps in sigwait() the kernel unblocks
the signals it waits for (its SigBlk lacks them, and its wchan reads
``do_sigtimedwait``), so a thread whose SigBlk has the signal does not wait
for it, whatever its wchan says.
"""

from __future__ import annotations

import os
import time
from typing import Literal

from suspendguard.system.kcmp import same_files
from suspendguard.system.procfs import ProcAccessError, ProcFS

# deliverable: a thread does not block it; waited: a thread waits for it in
# sigwait, or every thread blocks it and a signalfd takes it; never: blocked in
# every thread and nothing waits for it; unknown: the guard could not read the
# threads, never to be read as "never".
Delivery = Literal["deliverable", "waited", "never", "unknown"]

SIGWAIT_WCHAN = b"do_sigtimedwait"
# A thread in these states is exiting: the kernel hands it no signal.
_EXITING = ("Z", "X")
# "never" is said only when a second look this much later agrees: a thread that
# calls sigwait() in a loop blocks the signal between two calls.
SECOND_LOOK_S = 0.02


def delivery(proc: ProcFS, pid: int, signum: int, at: int | None = None) -> Delivery:
    """Whether ``signum`` sent to ``pid`` can reach it; two reads when the main thread takes it.

    ``at``: an :meth:`ProcFS.open_dir` fd on the process, read through
    instead of the pid.
    """
    own = at is None
    if at is None:
        at = proc.open_dir(pid)
        if at is None:
            return "unknown"
    try:
        found = _delivery(proc, pid, 1 << (signum - 1), at)
        if found == "never":
            time.sleep(SECOND_LOOK_S)
            found = _delivery(proc, pid, 1 << (signum - 1), at)
        return found
    except ProcAccessError:
        return "unknown"
    finally:
        if own:
            os.close(at)


def _delivery(proc: ProcFS, pid: int, bit: int, at: int) -> Delivery:
    blocking = []
    for tid in [pid, *(t for t in proc.task_ids(at) if t != pid)]:
        blocks = _blocks(proc, pid, tid, bit, at)
        if blocks is False:
            return "waited" if _in_sigwait(proc, pid, tid, at) else "deliverable"
        if blocks:
            blocking.append(tid)
    if not blocking:
        return "unknown"  # every thread is exiting, or gone
    return "waited" if _signalfd_takes(proc, pid, bit, at, blocking) else "never"


def _blocks(proc: ProcFS, pid: int, tid: int, bit: int, at: int) -> bool | None:
    """Whether thread ``tid`` blocks the signal; None when it is gone or exiting."""
    data = proc.read(pid, f"task/{tid}/status", at)
    if data is None:
        return None
    state, blocked = "", 0
    for line in data.decode("ascii", "replace").split("\n"):
        key, _, value = line.partition(":")
        if key == "State":
            state = value.strip()[:1]
        elif key == "SigBlk":
            try:
                blocked = int(value.strip(), 16)
            except ValueError:
                return None
    if state in _EXITING:
        return None
    return bool(blocked & bit)


def _in_sigwait(proc: ProcFS, pid: int, tid: int, at: int) -> bool:
    """Whether thread ``tid`` sleeps in sigwait(); False where the guard cannot see.

    Its wchan reads "0" while it runs, and for a reader that may not trace
    the process; the compiler may have renamed the function
    (``do_sigtimedwait.isra.0``).
    """
    try:
        wchan = (proc.read(pid, f"task/{tid}/wchan", at) or b"").strip()
    except ProcAccessError:
        return False
    return wchan == SIGWAIT_WCHAN or wchan.startswith(SIGWAIT_WCHAN + b".")


def _signalfd_takes(proc: ProcFS, pid: int, bit: int, at: int, tids: list[int]) -> bool:
    """Whether a signalfd in the process's fd table (or a thread's own one) has the signal."""
    live = proc.root == "/proc"  # kcmp takes this namespace's pids
    folders = ["", *(f"task/{tid}/" for tid in tids
                     if tid != pid and not (live and same_files(pid, tid)))]
    for folder in folders:
        for fd in proc.anon_fds(at, f"{folder}fd", "signalfd"):
            info = proc.read(pid, f"{folder}fdinfo/{fd}", at)
            if info is not None and signalfd_mask(info) & bit:
                return True
    return False


def signalfd_mask(fdinfo: bytes) -> int:
    """The signals a signalfd takes, from its fdinfo (``sigmask:``, bit N-1 for signal N)."""
    for line in fdinfo.decode("ascii", "replace").split("\n"):
        key, _, value = line.partition(":")
        if key == "sigmask":
            try:
                return int(value.strip(), 16)
            except ValueError:
                return 0
    return 0
