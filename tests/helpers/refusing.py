"""/proc as it is, but one process's fd table refused even to root; a process's own fd table
full but for a few descriptors."""

from __future__ import annotations

from typing import Any

from suspendguard.system.procfs import ProcAccessError, ProcFS


class RefusingFds(ProcFS):
    """/proc as it is, but one process's fd table refuses even root (EACCES), as the kernel
    does for some processes (PID 1 of some containers, one stuck in a driver call, a Yama
    or LSM rule)."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.refused = pid

    def open_paths(self, pid: int, *args: Any, **kw: Any) -> list[tuple[str, str]]:
        if pid == self.refused:
            raise ProcAccessError(f"/proc/{pid}/fd: Permission denied")
        return super().open_paths(pid, *args, **kw)


def descriptors_left(free: int) -> str:
    """Python lines that take every descriptor this process may open but ``free`` of them
    (its limit lowered to 64 first): for a child of its own, the limit being the process's,
    whose next open past those ``free`` fails with EMFILE, for real."""
    return f"""
import os, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
_taken = []
try:
    while True:
        _taken.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
for _ in range({free}):
    os.close(_taken.pop())
"""
