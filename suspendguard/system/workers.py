"""Share work among forked worker processes, one share each.

Used where one core is the bottleneck on a big input (the /proc scan of a
busy host, a large set of device logs): the Python side of the work is not
serialised by the GIL as it would be in threads. Results cross back as JSON
through a pipe. A worker that fails has its share done in-process, so the
answer never depends on a fork having worked. Where forking is not safe, a
bounded run keeps its bound in threads (:func:`_threaded`).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time
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
    *,
    until: float | None = None,
    late: Callable[[S], R] | None = None,
) -> list[R]:
    """``work(share)`` for every share, in order: the first here, the others forked.

    With ``until`` (a time.monotonic() time) and ``late``, every share is forked and
    waited for until then at most: a worker that has not answered by then (a read of
    /proc that blocks, behind a process stuck in a driver with its memory's lock held)
    is killed, and its share is ``late(share)``. Where no fork is safe, each share runs
    in a thread instead, waited for as long.
    """
    if until is not None and late is not None:
        if can_fork():
            return _bounded(shares, work, to_wire, from_wire, until, late)
        return _threaded(shares, work, until, late)
    if len(shares) <= 1 or not can_fork():
        return [work(share) for share in shares]
    children: list[tuple[int, int, int]] = []  # (pid, read end, share index)
    done: dict[int, R] = {}
    for index in range(1, len(shares)):
        worker = _fork(lambda share=shares[index]: to_wire(work(share)))  # type: ignore[misc]
        if worker is None:
            break
        children.append((*worker, index))
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
        answer = _answer(status, data, from_wire)
        done[index] = answer if answer is not None else work(shares[index])
    return [done[i] for i in range(len(shares))]


def _answer(status: int, data: bytes, from_wire: Callable[[Any], R]) -> R | None:
    """A worker's result; None when it failed (its share is then done here)."""
    if status != 0:
        return None
    try:
        return from_wire(json.loads(data))
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _fork(work: Callable[[], Any], alone: bool = False) -> tuple[int, int] | None:
    """A worker that writes ``work()``'s JSON into a pipe: (pid, read end), or None.
    ``alone``: it keeps no other descriptor of the guard's (a worker the kernel will not
    let die must not hold the guard's lock or its history open)."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        child = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if child == 0:  # pragma: no cover - runs in the forked worker
        status = 1
        try:
            os.close(r)
            if alone:
                os.closerange(3, w)
                os.closerange(w + 1, os.sysconf("SC_OPEN_MAX"))
            view = memoryview(json.dumps(work()).encode())
            while view:
                view = view[os.write(w, view):]
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    return child, r


def _bounded(shares: Sequence[S], work: Callable[[S], R], to_wire: Callable[[R], Any],
             from_wire: Callable[[Any], R], until: float, late: Callable[[S], R]) -> list[R]:
    """Every share in a worker, each read until ``until``; a late one killed."""
    done: dict[int, R] = {}
    running: dict[int, tuple[int, int, list[bytes]]] = {}  # read end: (pid, index, data)
    for index, share in enumerate(shares):
        forked = _fork(lambda share=share: to_wire(work(share)), alone=True)  # type: ignore[misc]
        if forked is None:
            done[index] = work(share)  # no worker to be had: here, as without a bound
            continue
        running[forked[1]] = (forked[0], index, [])
    poller = select.poll()
    for r in running:
        poller.register(r, select.POLLIN)
    try:
        while running:
            left = until - time.monotonic()
            if left <= 0:
                break
            for r, _mask in poller.poll(max(1, int(left * 1000))):
                chunk = os.read(r, 65536)
                child, index, data = running[r]
                if chunk:
                    data.append(chunk)
                    continue
                poller.unregister(r)
                os.close(r)
                del running[r]
                _, status = os.waitpid(child, 0)
                answer = _answer(status, b"".join(data), from_wire)
                done[index] = answer if answer is not None else work(shares[index])
    finally:
        for r, (child, index, _data) in running.items():
            os.close(r)
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
            done[index] = late(shares[index])
        _reap([child for child, _index, _data in running.values()])
    return [done[i] for i in range(len(shares))]


def _threaded(shares: Sequence[S], work: Callable[[S], R], until: float,
              late: Callable[[S], R]) -> list[R]:
    """Every share in a daemon thread, each waited for until ``until``; a late one left behind.

    A hung NVML or DCMI call stays in a thread of its own (idle/base.py), and from then on
    nothing forks; yet the wedged driver that hung it is what blocks a read of /proc too.
    A thread cannot be killed: one not done by then is abandoned, as that call's is.
    """
    boxes: list[dict[str, Any]] = [{} for _ in shares]
    running: dict[int, threading.Thread] = {}
    for index, share in enumerate(shares):
        thread = threading.Thread(target=_into, args=(boxes[index], work, share),
                                  name="suspendguard-share", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: here, as without a bound
            _into(boxes[index], work, share)
            continue
        running[index] = thread
    for thread in running.values():
        thread.join(max(0.0, until - time.monotonic()))
    done: list[R] = []
    for index, (share, box) in enumerate(zip(shares, boxes, strict=True)):
        if index in running and running[index].is_alive():
            done.append(late(share))
        elif "error" in box:
            raise box["error"]
        else:
            done.append(box["value"])
    return done


def _into(box: dict[str, Any], work: Callable[[S], R], share: S) -> None:
    """``work(share)`` into ``box``: its value, or the error to raise in the caller's thread."""
    try:
        box["value"] = work(share)
    except BaseException as exc:
        box["error"] = exc


# How long the killed workers are waited for: a SIGKILL ends a wait the kernel lets be
# killed at once; one it does not (an old kernel's) leaves its worker for this process's end.
REAP_S = 0.5


def _reap(children: list[int]) -> None:
    """Each killed worker reaped once it has died, waiting REAP_S at most for them all."""
    until = time.monotonic() + REAP_S
    left = set(children)
    while left:
        for child in list(left):
            try:
                if os.waitpid(child, os.WNOHANG)[0]:
                    left.discard(child)
            except ChildProcessError:
                left.discard(child)
        if not left or time.monotonic() >= until:
            return
        time.sleep(0.01)
