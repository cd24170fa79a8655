"""/proc as it is, but one process's fd table refused even to root."""

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
