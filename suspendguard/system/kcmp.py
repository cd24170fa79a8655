"""Whether two tasks share one fd table: the kcmp(2) system call, where the kernel has it.

The threads of a process normally share one fd table, so the scan reads it
once. A thread that called unshare(CLONE_FILES), or a process whose leader
has exited, has fds /proc/PID/fd does not show. kcmp(KCMP_FILES) tells in
one call per thread whether its table is the leader's.
"""

from __future__ import annotations

import ctypes
import errno
import platform

KCMP_FILES = 2

# kcmp's number per architecture (asm-generic for arm64 and riscv64).
_SYSCALL = {"x86_64": 312, "aarch64": 272, "riscv64": 272, "i686": 349, "armv7l": 378,
            "ppc64le": 354, "s390x": 343}

_libc: ctypes.CDLL | None = None
_available = _SYSCALL.get(platform.machine()) is not None


def same_files(pid1: int, pid2: int) -> bool | None:
    """True when both tasks use one fd table, False when not; None when kcmp cannot tell.

    "Cannot tell" covers a kernel without kcmp (ENOSYS), a seccomp filter
    that refuses it (EPERM) and a task that has gone (ESRCH): the caller then
    reads the task's table itself.
    """
    global _libc, _available
    if not _available:
        return None
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    result: int = _libc.syscall(_SYSCALL[platform.machine()], pid1, pid2, KCMP_FILES, 0, 0)
    if result < 0:
        if ctypes.get_errno() == errno.ENOSYS:
            _available = False
        return None
    return result == 0


KCMP_FILE = 0


def same_file(pid1: int, fd1: int, pid2: int, fd2: int) -> bool | None:
    """True when fd1 of pid1 and fd2 of pid2 are one open file description (one inherited
    across fork, or passed), False when not; None when kcmp cannot tell."""
    global _libc, _available
    if not _available:
        return None
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    result: int = _libc.syscall(_SYSCALL[platform.machine()], pid1, pid2, KCMP_FILE, fd1, fd2)
    if result < 0:
        if ctypes.get_errno() == errno.ENOSYS:
            _available = False
        return None
    return result == 0
