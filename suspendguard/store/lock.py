"""One guard at a time: an exclusive flock on a file in the state folder, naming its holder.

Two guards draining at once (the unit's run and one by hand) would signal
every job twice, and a second SIGINT aborts a Python job's KeyboardInterrupt
cleanup. A run that signals takes this lock first, waiting a bounded time;
one that cannot get it signals nobody and says which run holds it (a
drain, or a restore after resume, which acts on the same stops). The
lock is the kernel's (flock): it goes with its holder, SIGKILL included, so
a dead guard never leaves it taken.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from dataclasses import dataclass

LOCK_NAME = "guard.lock"
# A run waits this long at most (and never more than a third of its
# deadline): enough for a dry run's peek, or a run that is just ending.
LOCK_WAIT_S = 5.0
_POLL_S = 0.05


@dataclass
class GuardLock:
    """The lock as taken: ``fd`` is -1 when it was not; ``refused`` (another run holds
    it) or ``unusable`` (no lock file could be had) then says why.

    After a peek ``fd`` is the lock file open without a lock: a run keeps the
    file open either way until it ends, because that open file is how
    another run tells this run's pyACL probe (a child of this process) from
    a job that only borrowed its command line (guard/identity.py).
    """

    fd: int = -1
    refused: str = ""
    unusable: str = ""
    # Set when a run that does not lock found another run draining.
    busy_pid: int | None = None
    path: str = ""
    # A run that does not lock, told that another run drains as it looks.
    busy: str = ""
    # The lock taken, but its holder's pid not written (a full or failing disk): another
    # run is kept out all the same, only not told whose run holds it.
    unnamed: str = ""

    @property
    def warning(self) -> str:
        """What a run says of its lock, or "": none to be had, its holder not named in it, or
        another run draining as this one looks."""
        return self.unusable or self.unnamed or self.busy

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the only fd releases the flock
            self.fd = -1

    def token(self) -> tuple[str, tuple[int, int]] | None:
        """(path, (st_dev, st_ino)) of the open lock file; None when none is open."""
        if self.fd < 0:
            return None
        st = os.fstat(self.fd)
        # As the kernel names it in another process's /proc/PID/fd.
        return os.path.realpath(self.path), (st.st_dev, st.st_ino)


def _open(state_dir: str, create: bool) -> int:
    """The lock file, opened without following a symlink: this user's own, 0600, regular."""
    if create:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
    dfd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(LOCK_NAME, flags | (os.O_CREAT if create else 0), 0o600, dir_fd=dfd)
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file of this user's own")
    if stat.S_IMODE(st.st_mode) != 0o600:
        os.fchmod(fd, 0o600)
    return fd


def flock_within(fd: int, wait_s: float) -> bool:
    """Take an exclusive flock on ``fd``, waiting at most ``wait_s``; False when not had.

    An OSError other than "held by another" (ENOLCK from an NFS mount with no
    lock manager, say) is raised: the file cannot be locked at all.
    """
    until = time.monotonic() + max(0.0, wait_s)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= until:
                return False
            time.sleep(_POLL_S)


def holder_pid(fd: int) -> int | None:
    """The pid the run holding the lock wrote into it; None before it has."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def busy_reason(pid: int | None) -> str:
    who = f" (pid {pid})" if pid else ""
    return (f"another suspendguard run{who} is draining (or restoring jobs after a "
            "resume): this run signalled nobody; try again once it has ended")


def take(state_dir: str, wait_s: float) -> GuardLock:
    """The exclusive lock, waiting at most ``wait_s``; refused (with the reason) otherwise.

    A lock file that cannot be had at all (the state folder is not usable:
    a file in its way, not this user's, a symlink planted as the lock) is
    ``unusable``: like the history, it never costs a suspend its verdict.
    """
    path = os.path.join(state_dir, LOCK_NAME)
    try:
        fd = _open(state_dir, create=True)
    except OSError as exc:
        why = "a symlink; not followed" if exc.errno == errno.ELOOP else exc.strerror
        return GuardLock(unusable=f"no guard lock ({path}: {why}): a second run at the same "
                                  "time would not be kept out")
    try:
        had = flock_within(fd, wait_s)
    except OSError as exc:
        os.close(fd)
        return GuardLock(unusable=f"no guard lock ({path}: cannot lock it: {exc.strerror}): "
                                  "a second run at the same time would not be kept out")
    if not had:
        pid = holder_pid(fd)
        os.close(fd)
        return GuardLock(refused=busy_reason(pid), busy_pid=pid)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # the flock is what keeps another run out; the pid only names it
        return GuardLock(fd, path=path, unnamed=f"{path}: this run's pid not written "
                         f"({exc.strerror}): a run kept out by it cannot say whose it is")
    return GuardLock(fd, path=path)


def peek(state_dir: str) -> GuardLock:
    """For a run that signals nobody: no lock kept, only whether another run is draining.

    The file stays open (``fd``), unlocked, until the run releases it.
    """
    path = os.path.join(state_dir, LOCK_NAME)
    try:
        fd = _open(state_dir, create=False)
    except OSError:
        return GuardLock()  # no lock file, or not ours to read: nobody we can tell of
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = holder_pid(fd)
        who = f" (pid {pid})" if pid else ""
        return GuardLock(fd, busy_pid=pid or 0, path=path, busy=(
            f"another suspendguard run{who} is draining now (or restoring jobs after a "
            "resume): what this dry run shows may change as it does"))
    except OSError:
        return GuardLock(fd, path=path)  # not lockable here: nobody we can tell of
    # Never keep the shared lock: a run that drains would wait for it.
    fcntl.flock(fd, fcntl.LOCK_UN)
    return GuardLock(fd, path=path)
