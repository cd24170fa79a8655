"""Share work among forked worker processes, one share each.

Used where one core is the bottleneck on a big input (the /proc scan of a
busy host, a large set of device logs): the Python side of the work is not
serialised by the GIL as it would be in threads. Results cross back as JSON
through a pipe. A worker that fails has its share done in-process, so the
answer never depends on a fork having worked.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

S = TypeVar("S")
R = TypeVar("R")


def can_fork() -> bool:
    # fork() only from a single-threaded process: a child forked while
    # another thread holds a lock (status runs D-Bus queries in threads)
    # could deadlock.
    return hasattr(os, "fork") and threading.active_count() == 1


def run_shares(
    shares: Sequence[S],
    work: Callable[[S], R],
    to_wire: Callable[[R], Any],
    from_wire: Callable[[Any], R],
) -> list[R]:
    """``work(share)`` for every share, in order: the first here, the others forked."""
    if len(shares) <= 1 or not can_fork():
        return [work(share) for share in shares]
    children: list[tuple[int, int, int]] = []  # (pid, read end, share index)
    done: dict[int, R] = {}
    for index in range(1, len(shares)):
        try:
            r, w = os.pipe()
        except OSError:
            break
        try:
            child = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            break
        if child == 0:  # pragma: no cover - runs in the forked worker
            status = 1
            try:
                os.close(r)
                view = memoryview(json.dumps(to_wire(work(shares[index]))).encode())
                while view:
                    view = view[os.write(w, view):]
                status = 0
            finally:
                os._exit(status)
        os.close(w)
        children.append((child, r, index))
    forked = {index for _, _, index in children}
    try:
        for index in range(len(shares)):
            if index not in forked:
                done[index] = work(shares[index])
    except BaseException:
        for child, r, _ in children:  # no worker left behind, nor its pipe
            os.close(r)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(child, 0)
        raise
    for child, r, index in children:
        with os.fdopen(r, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(child, 0)
        try:
            if status != 0:
                raise ValueError(f"worker exited with status {status}")
            done[index] = from_wire(json.loads(data))
        except (ValueError, KeyError, IndexError, TypeError):
            done[index] = work(shares[index])
    return [done[i] for i in range(len(shares))]
