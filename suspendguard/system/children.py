"""Pids of the guard's own short-lived children (probes) while they run.

Kept apart from the runner so the scan can skip them without importing
subprocess on paths that start no program.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_active: set[int] = set()


def add(pid: int) -> None:
    with _lock:
        _active.add(pid)


def discard(pid: int) -> None:
    with _lock:
        _active.discard(pid)


def active() -> frozenset[int]:
    with _lock:
        return frozenset(_active)
