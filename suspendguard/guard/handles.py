"""A handle on one holder, taken race-free, and a signal sent through it.

A pidfd is opened per holder and the start time re-read through /proc after
it: if it differs from the scanned one the PID was recycled and the process
behind it is never signalled.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

from suspendguard.model import Holder, Outcome
from suspendguard.system.procfs import ProcAccessError, ProcFS

# Kernels before 5.3 (still shipped by distributions the Ascend driver
# supports) have no pidfd_open. There an fd on /proc/PID (ProcFS.open_dir)
# stands in for the pidfd: it keeps naming the process taken, and reads
# through it fail once that one is reaped, even if another has its PID by
# then; the wait looks through it every POLL_S, and a zombie (exited, not yet
# reaped by its parent; a zombie leader counts only once its last thread has
# gone) counts as exited. Nothing is reaped here: the guard's
# own children keep their exit status for whoever started them.
# The signal goes through that fd too (pidfd_send_signal, from Linux 5.1); only
# before 5.1 does it go by PID, right after a look that the process is there.
NO_PIDFD = -1
POLL_S = 0.01

GONE = Outcome("gone-before-signal", why="exited before the signal")
# How an Outcome says the holder is still there and the guard could not ask
# it to stop (run_state.py vetoes on it: such a holder has no backing for allow).
UNSIGNALLABLE = "could not be signalled"


@dataclass(frozen=True, slots=True)
class Watch:
    """Without a pidfd: the process taken, through its /proc/PID fd."""

    proc: ProcFS
    pid: int
    at: int

    def exited(self) -> bool:
        try:
            st = self.proc.stat(self.pid, self.at)
        except ProcAccessError:
            return False  # still there, only unreadable: it has not been replaced
        if st is None:
            return True
        # The leader's state is the process's only while it has no other thread:
        # a main thread that called pthread_exit is a zombie while the others
        # run on, holding the process's fds and taking its signals.
        return st.state == "Z" and self.proc.thread_count(self.at) <= 1


@dataclass
class Target:
    holder: Holder
    pidfd: int  # NO_PIDFD where the kernel has none: then ``watch`` watches it
    watch: Watch | None
    signalled_at: float
    last_signal: str
    escalated: bool = False
    # Not signalled by the guard: why it leaves all the same (its launcher
    # forwards the signal, or it is a worker that leaves with its parent).
    quiet: str = ""
    sent: bool = False  # signalled already, as the launcher of other holders
    reached: bool = False  # a signal was sent to it: the guard's, or its launcher's forward

    def close(self) -> None:
        close_fd(self.pidfd)
        if self.watch is not None:
            os.close(self.watch.at)


def pidfd_open(pid: int) -> int:
    if not hasattr(os, "pidfd_open"):
        raise OSError(errno.ENOSYS, "pidfd_open is not available")
    return os.pidfd_open(pid)


def take(holder: Holder, signame: str, proc: ProcFS,
          opener: Callable[[int], int]) -> Target | Outcome:
    """A handle on ``holder`` if it is still the process that was scanned, else its outcome.

    The handle is taken first and the start time confirmed after it, so a
    handle that passes names the scanned process and no other.
    """
    watch = None
    try:
        fd = opener(holder.pid)
    except ProcessLookupError:
        return GONE
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return Outcome("not-signalled",
                           why=f"{UNSIGNALLABLE}: pidfd_open failed: {exc.strerror}")
        fd = NO_PIDFD
        try:
            at = proc.open_dir(holder.pid)
        except ProcAccessError:
            return _unconfirmed(holder, "")
        if at is None:
            return GONE
        watch = Watch(proc, holder.pid, at)
    target = Target(holder, fd, watch, 0.0, signame)
    try:
        st = proc.stat(holder.pid, None if watch is None else watch.at)
    except ProcAccessError:
        target.close()
        return _unconfirmed(holder, "/stat")
    except OSError as exc:  # EMFILE: the pidfd took the last descriptor the limit allows
        target.close()
        why = (": more holders than the guard's limit on open files, ulimit -n"
               if exc.errno == errno.EMFILE else "")
        return Outcome("not-signalled", why=(
            f"{UNSIGNALLABLE}: its start time could not be read ({exc.strerror}{why})"))
    if st is None:
        target.close()
        return GONE
    if st.start_time != holder.start_time:
        target.close()
        return Outcome(
            "not-signalled",
            why=f"pid {holder.pid} was reused by another process (start time changed)",
        )
    return target


def _unconfirmed(holder: Holder, entry: str) -> Outcome:
    """A holder still there whose start time was refused to the guard: whether it is still
    the process scanned cannot be told, so it is not signalled, and it vetoes, named."""
    return Outcome("not-signalled", why=(
        f"{UNSIGNALLABLE}: its start time could not be read (/proc/{holder.pid}{entry} "
        "refused to the guard)"))


def close_fd(fd: int) -> None:
    if fd >= 0:
        os.close(fd)


def send(target: Target, signum: int) -> Outcome | None:
    """None once the signal is sent, else the holder's outcome (gone, or refused to us)."""
    try:
        if target.watch is None:
            signal.pidfd_send_signal(target.pidfd, signum)
        elif target.watch.exited():
            return GONE
        else:
            _send_through_dir(target.watch, signum)
    except ProcessLookupError:
        return GONE
    except PermissionError:
        # Another user's process and no CAP_KILL (a unit's bounding set, a
        # guard run by a user): it keeps running, and holding.
        return Outcome("not-signalled",
                       why=f"{UNSIGNALLABLE}: permission denied (another user's process, "
                           "and the guard lacks CAP_KILL)")
    return None


def _send_through_dir(watch: Watch, signum: int) -> None:
    """The signal through the /proc/PID fd, which pidfd_send_signal takes (Linux 5.1 and
    later); by PID where the kernel lacks that call (ENOSYS), or takes the fd for no
    process's (EBADF: a /proc root that is not procfs)."""
    if hasattr(signal, "pidfd_send_signal"):  # a Python built on older headers lacks it
        try:
            signal.pidfd_send_signal(watch.at, signum)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EBADF):
                raise
    os.kill(watch.pid, signum)
